from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "trainhub.registry"
    verbose_name = "Model registry"
