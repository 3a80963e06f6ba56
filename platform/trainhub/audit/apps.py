from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "trainhub.audit"
    verbose_name = "Audit log"
