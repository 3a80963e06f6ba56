from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save, pre_save


class TenancyConfig(AppConfig):
    name = "trainhub.tenancy"

    def ready(self) -> None:
        from django.contrib.auth.models import User

        from .models import Membership
        from .services import access_lost
        from .tokens import note_password_change, revoke_on_password_change

        pre_save.connect(note_password_change, sender=User, dispatch_uid="tokens-password")
        post_save.connect(revoke_on_password_change, sender=User, dispatch_uid="tokens-password")
        post_delete.connect(access_lost, sender=Membership, dispatch_uid="access-membership")
        post_delete.connect(access_lost, sender=User, dispatch_uid="access-user")
