"""Every enrollment token has an expiry and a use limit (default: one use)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("nodes", "0004_token_terms_node_labels"),
    ]

    operations = [
        migrations.AlterField(
            model_name="enrollmenttoken",
            name="expires_at",
            field=models.DateTimeField(blank=True),
        ),
        migrations.AlterField(
            model_name="enrollmenttoken",
            name="max_uses",
            field=models.PositiveIntegerField(default=1),
        ),
    ]
