"""What the scheduler keeps between cycles."""

from __future__ import annotations

from django.db import models

from trainhub.jobs.models import Job
from trainhub.nodes.models import Node


class Reservation(models.Model):
    """Capacity freed (by shrinking or preempting others) for a pending job, held for it
    until it starts so that no other job takes it and causes another preemption."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="reservations")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="reservations")
    cpu = models.FloatField()
    memory_mb = models.FloatField()
    gpu = models.FloatField()
    # The model of the reserved GPUs (a worker's `resources.gpu_model`); "" for any.
    gpu_model = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["job_id", "node_id"]

    def __str__(self) -> str:
        return f"job {self.job_id} on node {self.node_id}"


class CycleRecord(models.Model):
    """The last scheduling cycle (one row): when it ran and what it decided."""

    ran_at = models.DateTimeField()
    policy = models.CharField(max_length=16)
    observe_only = models.BooleanField(default=False)
    summary = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"cycle at {self.ran_at:%Y-%m-%d %H:%M:%S} ({self.policy})"


class VruntimeAccrual(models.Model):
    """The virtual runtime a job accrued while running, apart from the job's row: each
    cycle adds to every running job's, and a change to the job's row would make every
    process's cluster cache read the job again (`cache.py`). A job's virtual runtime is
    `Job.vruntime` plus this (`vruntime.seen_vruntime`)."""

    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, primary_key=True, related_name="vruntime_accrual"
    )
    vruntime = models.FloatField(default=0)

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.vruntime:g}"
