from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "trainhub.experiments"
