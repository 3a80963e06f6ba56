"""Metric points and log lines reported by a job's processes."""

from __future__ import annotations

from django.db import models
from django.db.models import Value

from trainhub.jobs.models import Job, Task


class MetricChunk(models.Model):
    """Points of one metric of a job, compressed (`codec.py`): a batch as it was stored,
    or up to `chunks.CHUNK_POINTS` points merged from small ones (`chunks.compact`).

    The hottest table: no database-level foreign keys (their checks at commit cost, see
    bench/telemetry.py) and no index of job alone (the (job, name, last_step) index serves
    it). Ingest only stores points of a task it looked up (`agents.services.ingest_batch`),
    and deleting a job or task cascades in Django.
    """

    job = models.ForeignKey(
        Job,
        on_delete=models.CASCADE,
        related_name="metric_chunks",
        db_constraint=False,
        db_index=False,
    )
    task = models.ForeignKey(
        Task,
        null=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    name = models.CharField(max_length=100)
    first_step = models.BigIntegerField()
    last_step = models.BigIntegerField()
    first_time = models.DateTimeField()
    last_time = models.DateTimeField()
    count = models.IntegerField()
    data = models.BinaryField()

    class Meta:
        # A range of steps: the chunks whose last step is at or past its start, up to the
        # first that starts after its end (steps mostly grow with the chunk id).
        indexes = [models.Index(fields=["job", "name", "last_step"], name="telemetry_chunk_range")]

    def __str__(self) -> str:
        return f"{self.job_id} {self.name}@{self.first_step}..{self.last_step} ({self.count})"


class MetricSeries(models.Model):
    """One metric of a job: its first and last step and its number of points.

    Kept at ingest beside the chunks; a chart query starts here.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=100)
    first_step = models.BigIntegerField()
    last_step = models.BigIntegerField()
    count = models.BigIntegerField()
    # Chunks of fewer than `chunks.FULL_CHUNK` points stored since the last compaction:
    # at `chunks.COMPACT_AT` they are merged (in the transaction that stores the batch).
    small_chunks = models.IntegerField(default=0, db_default=0)

    class Meta:
        verbose_name_plural = "metric series"
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="telemetry_series_job_name")
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.name} ({self.count} points)"


class MetricRollup(models.Model):
    """Min, max, count and last point of one metric over the block of 16**level steps
    starting at step `block * 16**level` (see `rollups.py`)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=100)
    level = models.PositiveSmallIntegerField()
    block = models.BigIntegerField()
    min_value = models.FloatField()
    max_value = models.FloatField()
    count = models.BigIntegerField()
    last_step = models.BigIntegerField()
    last_value = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["job", "name", "level", "block"], name="telemetry_rollup_block"
            )
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.name} L{self.level}#{self.block}"


class LogChunk(models.Model):
    """Consecutive output lines of one task and stream, as one ingest stored them (a batch
    over `logchunks.CHUNK_LINES` lines or `CHUNK_BYTES` bytes is split): `lines` joined with
    newlines (a stored line holds none), which PostgreSQL compresses by itself (TOAST).

    A task's chunks, in id order, are its stored stream: the chunk's first line starts at
    byte `offset` of it, and its last line's newline ends at `end_offset`. A line's id is
    `logchunks.line_id(chunk id, index)`. Like `MetricChunk`, no database-level foreign
    keys; deleting a job or task cascades (or sets null) in Django.
    """

    job = models.ForeignKey(
        Job,
        on_delete=models.CASCADE,
        related_name="log_chunks",
        db_constraint=False,
        db_index=False,
    )
    task = models.ForeignKey(
        Task,
        null=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    source = models.CharField(max_length=40, help_text="e.g. worker-0")
    stream = models.CharField(max_length=8)
    offset = models.BigIntegerField(help_text="Byte offset of the first line in the task's stream.")
    end_offset = models.BigIntegerField(help_text="Byte offset after the last line's newline.")
    count = models.IntegerField(help_text="Lines in the chunk.")
    time = models.DateTimeField()
    lines = models.TextField(help_text='The lines, joined with "\\n".')

    class Meta:
        indexes = [
            models.Index(fields=["job", "id"], name="telemetry_logchunk_job"),
            # `?source=worker-0` with `?tail=`: that task's last lines without a scan.
            models.Index(fields=["job", "source", "id"], name="telemetry_logchunk_source"),
            # `?task=<id>` with `?tail=`, a task's stderr tail, and the next offset of a
            # task's stream at ingest (its last chunk's `end_offset`).
            models.Index(fields=["task", "id"], name="telemetry_logchunk_task"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} [{self.source}] {self.count} lines at {self.offset}"


class JobTelemetry(models.Model):
    """What a job has stored and dropped against its budgets, and whether retention has
    deleted its raw points and log lines. One row per job that reported anything; the
    ingest locks it, so the batches of one job are counted one after another."""

    job = models.OneToOneField(
        Job, primary_key=True, on_delete=models.CASCADE, related_name="telemetry"
    )
    points = models.BigIntegerField(default=0, help_text="Metric points stored.")
    points_dropped = models.BigIntegerField(default=0, help_text="Points over the budget.")
    log_bytes = models.BigIntegerField(default=0, help_text="Log bytes stored (with newlines).")
    log_lines_dropped = models.BigIntegerField(default=0, help_text="Lines over the budget.")
    log_bytes_dropped = models.BigIntegerField(default=0)
    purged_at = models.DateTimeField(
        null=True, blank=True, help_text="When retention deleted the raw points and log lines."
    )
    # The job's progress, the input of stall detection (`progress.py`): its last progress,
    # recent intervals between progresses, phase time. A database default too: some tests
    # and tools insert rows with SQL.
    progress = models.JSONField(
        default=dict, blank=True, db_default=Value({}, output_field=models.JSONField())
    )

    class Meta:
        verbose_name_plural = "job telemetry"

    def __str__(self) -> str:
        return f"{self.job_id}: {self.points} points, {self.log_bytes} log bytes"
