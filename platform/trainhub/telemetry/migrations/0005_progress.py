# Stall detection (issue 30, item 3): each job's progress, recorded at ingest.

import django.db.models
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0004_metric_points_without_db_constraints"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobtelemetry",
            name="progress",
            field=models.JSONField(
                blank=True,
                db_default=django.db.models.Value({}, output_field=models.JSONField()),
                default=dict,
            ),
        ),
    ]
