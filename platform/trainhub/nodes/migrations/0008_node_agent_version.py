"""Nodes record the version their agent runs."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("nodes", "0007_node_credential_expiry"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="agent_version",
            field=models.CharField(blank=True, default="", editable=False, max_length=64),
        ),
    ]
