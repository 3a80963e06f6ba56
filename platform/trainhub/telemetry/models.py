"""Metric points and log lines reported by a job's processes."""

from __future__ import annotations

from django.db import models

from trainhub.jobs.models import Job, Task


class MetricPoint(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metric_points")
    task = models.ForeignKey(Task, null=True, on_delete=models.SET_NULL, related_name="+")
    name = models.CharField(max_length=100)
    step = models.BigIntegerField()
    value = models.FloatField()
    time = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["job", "name", "step"])]
        ordering = ["job_id", "name", "step", "id"]

    def __str__(self) -> str:
        return f"{self.job_id} {self.name}@{self.step}={self.value}"


class LogLine(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_lines")
    task = models.ForeignKey(Task, null=True, on_delete=models.SET_NULL, related_name="+")
    source = models.CharField(max_length=40, help_text="e.g. worker-0")
    stream = models.CharField(max_length=8)
    line = models.TextField()
    time = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["job", "id"])]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.job_id} [{self.source}] {self.line[:60]}"
