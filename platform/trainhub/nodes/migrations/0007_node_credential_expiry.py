"""Node credentials expire and can be revoked; enrolled nodes get the default lifetime."""

from datetime import timedelta

from django.conf import settings
from django.db import migrations, models
from django.utils import timezone


def give_existing_credentials_a_lifetime(apps, schema_editor):
    Node = apps.get_model("nodes", "Node")
    expires = timezone.now() + timedelta(days=settings.NODE_CREDENTIAL_DAYS)
    Node.objects.filter(credential_expires_at__isnull=True).update(credential_expires_at=expires)


class Migration(migrations.Migration):
    dependencies = [
        ("nodes", "0006_node_isolation"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="credential_expires_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="previous_credential_hash",
            field=models.CharField(blank=True, editable=False, max_length=128),
        ),
        migrations.AddField(
            model_name="node",
            name="previous_credential_until",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="credential_revoked_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(give_existing_credentials_a_lifetime, migrations.RunPython.noop),
    ]
