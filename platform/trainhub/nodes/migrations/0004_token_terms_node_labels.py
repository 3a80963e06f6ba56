"""Nodes have labels; enrollment tokens issued before expiry and use limits became
required get the longest lifetime new tokens may have (seven days from the migration)
and the largest use limit the API allowed. 0005 then makes both fields required (a
separate migration: PostgreSQL alters no table with updates pending in the transaction).
"""

from datetime import timedelta

from django.db import migrations, models
from django.utils import timezone

LEGACY_MAX_USES = 1_000_000


def bound_legacy_tokens(apps, schema_editor):
    token_model = apps.get_model("nodes", "EnrollmentToken")
    token_model.objects.filter(expires_at__isnull=True).update(
        expires_at=timezone.now() + timedelta(days=7)
    )
    token_model.objects.filter(max_uses__isnull=True).update(max_uses=LEGACY_MAX_USES)


class Migration(migrations.Migration):
    dependencies = [
        ("nodes", "0003_node_owner"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="labels",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(bound_legacy_tokens, migrations.RunPython.noop),
    ]
