"""Metric points as compressed chunks: every `MetricPoint` row becomes part of a
`MetricChunk` (per job, metric and task, up to 4,096 points each, in step order), then
the per-point table is dropped. Reversible: the chunks are decoded back into rows."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import groupby
from typing import Any

import django.db.models.deletion
import numpy as np
from django.db import migrations, models

from trainhub.telemetry.codec import Columns, decode, encode

CHUNK_POINTS = 4096
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _chunks(rows: list[tuple[int, float, datetime]]) -> Iterator[tuple[Columns, int, int]]:
    for i in range(0, len(rows), CHUNK_POINTS):
        part = rows[i : i + CHUNK_POINTS]
        columns = Columns(
            np.asarray([s for s, _, _ in part], dtype=np.int64),
            np.asarray([(t - _EPOCH) // _MICROSECOND for _, _, t in part], dtype=np.int64),
            np.asarray([v for _, v, _ in part], dtype=np.float64),
        )
        yield columns, int(columns.times.min()), int(columns.times.max())


def points_to_chunks(apps: Any, schema_editor: Any) -> None:
    point = apps.get_model("telemetry", "MetricPoint")
    chunk = apps.get_model("telemetry", "MetricChunk")
    rows = (
        point.objects.order_by("job_id", "name", "task_id", "step", "id")
        .values_list("job_id", "name", "task_id", "step", "value", "time")
        .iterator(chunk_size=10_000)
    )
    for (job_id, name, task_id), group in groupby(rows, key=lambda r: r[:3]):
        points = [(step, value, time) for _, _, _, step, value, time in group]
        chunk.objects.bulk_create(
            chunk(
                job_id=job_id,
                task_id=task_id,
                name=name,
                first_step=int(columns.steps[0]),
                last_step=int(columns.steps[-1]),
                first_time=_EPOCH + timedelta(microseconds=first),
                last_time=_EPOCH + timedelta(microseconds=last),
                count=len(columns),
                data=encode(columns),
            )
            for columns, first, last in _chunks(points)
        )


def chunks_to_points(apps: Any, schema_editor: Any) -> None:
    point = apps.get_model("telemetry", "MetricPoint")
    chunk = apps.get_model("telemetry", "MetricChunk")
    found = chunk.objects.order_by("id").values_list("job_id", "task_id", "name", "data")
    for job_id, task_id, name, data in found.iterator(chunk_size=100):
        columns = decode(data)
        point.objects.bulk_create(
            point(
                job_id=job_id,
                task_id=task_id,
                name=name,
                step=step,
                value=value,
                time=_EPOCH + timedelta(microseconds=time),
            )
            for step, value, time in zip(
                columns.steps.tolist(),
                columns.values.tolist(),
                columns.times.tolist(),
                strict=True,
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0013_trial_checkpoints_hold"),
        ("telemetry", "0005_progress"),
    ]

    operations = [
        migrations.AddField(
            model_name="metricseries",
            name="small_chunks",
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.CreateModel(
            name="MetricChunk",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100)),
                ("first_step", models.BigIntegerField()),
                ("last_step", models.BigIntegerField()),
                ("first_time", models.DateTimeField()),
                ("last_time", models.DateTimeField()),
                ("count", models.IntegerField()),
                ("data", models.BinaryField()),
                (
                    "job",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="metric_chunks",
                        to="jobs.job",
                    ),
                ),
                (
                    "task",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="jobs.task",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="metricchunk",
            index=models.Index(fields=["job", "name", "last_step"], name="telemetry_chunk_range"),
        ),
        migrations.RunPython(points_to_chunks, chunks_to_points),
        migrations.DeleteModel(name="MetricPoint"),
    ]
