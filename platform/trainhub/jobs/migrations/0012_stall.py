# Stall detection (issue 30, item 3): when a running job was found stalled.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0011_retry"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="stalled_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
