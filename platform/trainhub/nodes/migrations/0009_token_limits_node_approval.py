"""Enrollment tokens carry limits on the nodes they enroll and may require approval;
nodes record whether they await it and when their GPUs are capped to what they report."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("nodes", "0008_node_agent_version"),
    ]

    operations = [
        migrations.AddField(
            model_name="enrollmenttoken",
            name="labels",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="enrollmenttoken",
            name="max_cpus",
            field=models.FloatField(blank=True, help_text="Empty: no limit.", null=True),
        ),
        migrations.AddField(
            model_name="enrollmenttoken",
            name="max_gpus",
            field=models.PositiveIntegerField(blank=True, help_text="Empty: no limit.", null=True),
        ),
        migrations.AddField(
            model_name="enrollmenttoken",
            name="max_memory_mb",
            field=models.PositiveBigIntegerField(
                blank=True, help_text="Empty: no limit.", null=True
            ),
        ),
        migrations.AddField(
            model_name="enrollmenttoken",
            name="requires_approval",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="node",
            name="awaiting_approval",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.AddField(
            model_name="node",
            name="capacity_capped",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
    ]
