"""Log lines as chunks: every `LogLine` row becomes part of a `LogChunk`, then the
per-line table is dropped.

Consecutive rows in id order of one job, task, source, stream and time whose offsets
follow one another (what one ingest stored) make one chunk, up to 4,096 lines and
256 KiB, keeping their offsets. Rows are read and chunks written in batches. Reversible:
the chunks are split back into rows.

Line ids change: a line's id is now its chunk's id * 2**16 plus its index in the chunk.
Clients' cursors (`GET …/logs/?after=<id>`, a job page's live log) restart: an open job
page reloads its log from the start.
"""

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

CHUNK_LINES = 4096
CHUNK_BYTES = 256 * 1024
WRITE_BATCH = 500
# (job id, task id, source, stream, time): what the lines of one chunk share.
Key = tuple[int, int | None, str, str, datetime]


class _Run:
    """Lines of one key being gathered into a chunk."""

    def __init__(self, key: Key, offset: int) -> None:
        self.key, self.offset, self.end = key, offset, offset
        self.texts: list[str] = []

    def takes(self, key: Key, offset: int, parts: list[str], size: int) -> bool:
        return (
            key == self.key
            and offset == self.end
            and len(self.texts) + len(parts) <= CHUNK_LINES
            and self.end - self.offset + size <= CHUNK_BYTES
        )

    def add(self, parts: list[str], size: int) -> None:
        self.texts += parts
        self.end += size


def _runs(rows: Iterator[tuple[Any, ...]]) -> Iterator[_Run]:
    run: _Run | None = None
    for job_id, task_id, source, stream, time, offset, text in rows:
        key = (job_id, task_id, source, stream, time)
        parts = text.split("\n")  # a stored line holds no newline
        size = len(text.encode()) + 1
        if run is None or not run.takes(key, offset, parts, size):
            if run is not None:
                yield run
            run = _Run(key, offset)
        run.add(parts, size)
    if run is not None:
        yield run


def lines_to_chunks(apps: Any, schema_editor: Any) -> None:
    line = apps.get_model("telemetry", "LogLine")
    chunk = apps.get_model("telemetry", "LogChunk")
    rows = (
        line.objects.order_by("id")
        .values_list("job_id", "task_id", "source", "stream", "time", "offset", "line")
        .iterator(chunk_size=10_000)
    )
    batch = []
    for run in _runs(rows):
        job_id, task_id, source, stream, time = run.key
        batch.append(
            chunk(
                job_id=job_id,
                task_id=task_id,
                source=source,
                stream=stream,
                offset=run.offset,
                end_offset=run.end,
                count=len(run.texts),
                time=time,
                lines="\n".join(run.texts),
            )
        )
        if len(batch) >= WRITE_BATCH:
            chunk.objects.bulk_create(batch)
            batch = []
    chunk.objects.bulk_create(batch)


def chunks_to_lines(apps: Any, schema_editor: Any) -> None:
    line = apps.get_model("telemetry", "LogLine")
    chunk = apps.get_model("telemetry", "LogChunk")
    found = chunk.objects.order_by("id").values_list(
        "job_id", "task_id", "source", "stream", "time", "offset", "lines"
    )
    for job_id, task_id, source, stream, time, offset, lines in found.iterator(chunk_size=100):
        rows = []
        for text in lines.split("\n"):
            rows.append(
                line(
                    job_id=job_id,
                    task_id=task_id,
                    source=source,
                    stream=stream,
                    offset=offset,
                    line=text,
                    time=time,
                )
            )
            offset += len(text.encode()) + 1
        line.objects.bulk_create(rows, batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0013_trial_checkpoints_hold"),
        ("telemetry", "0006_metric_chunks"),
    ]

    operations = [
        migrations.CreateModel(
            name="LogChunk",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("source", models.CharField(help_text="e.g. worker-0", max_length=40)),
                ("stream", models.CharField(max_length=8)),
                (
                    "offset",
                    models.BigIntegerField(
                        help_text="Byte offset of the first line in the task's stream."
                    ),
                ),
                (
                    "end_offset",
                    models.BigIntegerField(help_text="Byte offset after the last line's newline."),
                ),
                ("count", models.IntegerField(help_text="Lines in the chunk.")),
                ("time", models.DateTimeField()),
                ("lines", models.TextField(help_text='The lines, joined with "\\n".')),
                (
                    "job",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="log_chunks",
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
        migrations.RunPython(lines_to_chunks, chunks_to_lines),
        migrations.AddIndex(
            model_name="logchunk",
            index=models.Index(fields=["job", "id"], name="telemetry_logchunk_job"),
        ),
        migrations.AddIndex(
            model_name="logchunk",
            index=models.Index(fields=["job", "source", "id"], name="telemetry_logchunk_source"),
        ),
        migrations.AddIndex(
            model_name="logchunk",
            index=models.Index(fields=["task", "id"], name="telemetry_logchunk_task"),
        ),
        migrations.DeleteModel(name="LogLine"),
    ]
