from django.apps import AppConfig
from django.conf import settings


class ApiConfig(AppConfig):
    name = "trainhub.api"

    def ready(self) -> None:
        if settings.ENVIRONMENT == "production":
            from .deploy_checks import refuse_insecure_deploy

            refuse_insecure_deploy()
