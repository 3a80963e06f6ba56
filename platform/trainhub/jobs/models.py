"""Jobs, their tasks and their event history."""

from __future__ import annotations

import os
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from trainhub.nodes.models import Node
from trainhub.tenancy.models import Team
from trainhub.tenancy.resources import Resources

from .choices import TASK_ACTIVE, DesiredState, JobState, Priority, TaskRole, TaskState
from .jobspec import JobSpec


class JobQuerySet(models.QuerySet["Job"]):
    def visible_to(self, user: Any) -> JobQuerySet:
        if getattr(user, "is_superuser", False):
            return self.all()
        return self.filter(team__memberships__user=user)


class Job(models.Model):
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=100)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    priority = models.CharField(max_length=16, choices=Priority.choices, default=Priority.NORMAL)
    spec = models.JSONField(help_text="The validated job spec (v1).")
    state = models.CharField(
        max_length=16, choices=JobState.choices, default=JobState.PENDING, db_index=True
    )
    pending_reason = models.CharField(max_length=300, blank=True)
    message = models.TextField(blank=True, help_text="Why the job failed, if it did.")
    end_cause = models.CharField(
        max_length=32,
        blank=True,
        db_default="",  # rows inserted by COPY (`jobs.rows`) leave it out
        help_text="Why the task end that last failed or restarted the job happened "
        "(user_exception, out_of_memory, killed, node_lost, preempted, …; docs/design.md "
        "§Failure causes), or `succeeded`; empty while no task has ended.",
    )
    end_hint = models.TextField(
        blank=True, db_default="", help_text="What to do about `end_cause`, in one line."
    )
    # Shared secret of the job's gRPC cluster; handed to its tasks, never shown in the API.
    runtime_token = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Workers the job should run, set by scaling (None: the spec's minimum).
    target_workers = models.PositiveIntegerField(null=True, blank=True)
    # Restarts so far (worker relaunches, whole-job restarts, requeues), in two budgets
    # (`jobs.retries`): those after causes of the job's own (its code, its memory) are
    # bounded by the spec's max_restarts; those after causes in the spec's `retry.on` (a
    # lost node, the network) by `retry.max`.
    restarts = models.PositiveIntegerField(default=0)
    infra_restarts = models.PositiveIntegerField(default=0, db_default=0)
    # The signature of the last failure that restarted the job (`EndCause.signature`): the
    # same Python error twice in a row fails it rather than spending another restart.
    last_error = models.CharField(max_length=500, blank=True, default="", db_default="")
    # Scheduler bookkeeping (DESIGN.md §3): resources held x time / priority weight.
    vruntime = models.FloatField(default=0)
    # When the job's worker count last changed (start, growth, shrink): the freeze window.
    last_rescale_at = models.DateTimeField(null=True, blank=True)
    # Start of the current wait (submission, or requeue after a preemption); ages the job.
    pending_since = models.DateTimeField(null=True, blank=True)
    # Set while the job is preempted: when its coordinator was asked to checkpoint and stop.
    preempted_at = models.DateTimeField(null=True, blank=True)
    preemptions = models.PositiveIntegerField(default=0)
    # When the running job was found stalled (`jobs.stalls`: no progress for longer than its
    # limit); None while it progresses, and again once it resumes or is restarted.
    stalled_at = models.DateTimeField(null=True, blank=True)
    # The job whose checkpoint directory this one continues (a promoted trial of an
    # experiment resumes where its last run stopped); None: its own directory.
    checkpoints_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Held jobs wait in the queue whatever the capacity (their experiment is paused).
    held = models.BooleanField(default=False, db_default=False)
    # Borrowed capacity is reclaimed from such jobs before others (an experiment's trials:
    # they stop at checkpoints anyway).
    reclaim_first = models.BooleanField(default=False, db_default=False)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["team", "state"])]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @cached_property
    def job_spec(self) -> JobSpec:
        """The stored spec, typed (a job's spec never changes after it is submitted)."""
        return JobSpec.from_dict(self.spec)

    @property
    def checkpoint_dir(self) -> str:
        """Where the job's coordinator saves and restores its checkpoints."""
        owner = self.checkpoints_of_id or self.pk
        return os.path.join(settings.CHECKPOINT_ROOT, f"job-{owner}")

    @property
    def requested(self) -> Resources:
        """What the job asks for in all, summed over its tasks: its coordinator, every PS
        shard and the workers it wants (the spec's minimum until it is scaled)."""
        return self.job_spec.request(self.target_workers)


class Task(models.Model):
    """One process of a job: the coordinator, a PS shard or a worker replica."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="tasks")
    role = models.CharField(max_length=16, choices=TaskRole.choices)
    index = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField(default=1)
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.ASSIGNED)
    desired = models.CharField(max_length=8, choices=DesiredState.choices, default=DesiredState.RUN)
    node = models.ForeignKey(Node, null=True, on_delete=models.SET_NULL, related_name="tasks")
    port = models.PositiveIntegerField(null=True, blank=True)
    cpu = models.FloatField()
    memory_mb = models.PositiveBigIntegerField()
    gpu_indices = models.JSONField(default=list, blank=True)
    # Placed on idle quota lent by other teams: reclaimed first when they need it back.
    borrowed = models.BooleanField(default=False)
    # A PS of a replicated job relaunched alone: it copies its shards from a live replica
    # (TRAINHUB_PS_REJOIN). Every other new attempt starts afresh.
    rejoin = models.BooleanField(default=False)
    exit_code = models.IntegerField(null=True, blank=True)
    message = models.TextField(blank=True)
    end_cause = models.CharField(
        max_length=32,
        blank=True,
        db_default="",  # rows inserted by COPY (`jobs.rows`) leave it out
        help_text="Why the task's last attempt ended (user_exception, out_of_memory, killed, "
        "node_lost, preempted, …; docs/design.md §Failure causes); empty while it runs.",
    )
    end_hint = models.TextField(
        blank=True, db_default="", help_text="What to do about `end_cause`, in one line."
    )
    # A restart's backoff (`jobs.retries`): the attempt is not started before this time.
    not_before = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job_id", "role", "index"]
        constraints = [
            models.UniqueConstraint(fields=["job", "role", "index"], name="unique_task_slot")
        ]
        indexes = [
            # What runs now (node loads, team usage, the scheduler's snapshot) is a few
            # hundred rows among every task that ever ran: read them without a full scan.
            models.Index(
                fields=["node", "job"],
                condition=Q(state__in=sorted(TASK_ACTIVE)),
                name="jobs_task_active",
            ),
            # Restarts waiting out their backoff (`restarts.release_due_restarts`).
            models.Index(
                fields=["not_before"],
                condition=Q(not_before__isnull=False),
                name="jobs_task_waiting",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.role}-{self.index}"

    @property
    def address(self) -> str | None:
        if self.node is None or self.port is None:
            return None
        return f"{self.node.address}:{self.port}"


class RuntimeCA(models.Model):
    """A job's own CA for its runtime gRPC (`trainhub.jobs.pki`): it signs the certificate
    of each node the job's tasks run on. Server-side only: never in an API answer."""

    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, primary_key=True, related_name="runtime_ca"
    )
    cert = models.TextField()
    # The private key, encrypted (`trainhub.jobs.services.tls.seal`).
    sealed_key = models.TextField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"runtime CA of job {self.job_id}"


class RuntimeCertificate(models.Model):
    """The certificate the tasks of a job present on one node (its address is the SAN),
    signed by the job's CA; handed only to that node's agent."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="runtime_certificates")
    host = models.CharField(max_length=255)
    cert = models.TextField()
    sealed_key = models.TextField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "host"], name="unique_runtime_certificate")
        ]

    def __str__(self) -> str:
        return f"runtime certificate of job {self.job_id} for {self.host}"


class JobEvent(models.Model):
    """One entry of a job's history: a transition or a notable thing that happened."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    time = models.DateTimeField()
    kind = models.CharField(max_length=32)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16, blank=True)
    reason = models.TextField(blank=True)
    actor = models.CharField(max_length=150, help_text="Who or what caused it.")

    class Meta:
        ordering = ["time", "id"]
        # The dashboard's recent events: the newest of all, read backwards.
        indexes = [models.Index(fields=["time", "id"], name="jobs_jobevent_time_id")]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind} {self.from_state}->{self.to_state}"


class CodeArchiveQuerySet(models.QuerySet["CodeArchive"]):
    def visible_to(self, user: Any) -> CodeArchiveQuerySet:
        """Archives uploaded by a team of `user` (platform admins: all)."""
        if getattr(user, "is_superuser", False):
            return self.all()
        return self.filter(uploads__team__memberships__user=user).distinct()


class CodeArchive(models.Model):
    """A user's code (`.tar.gz` or `.zip`), stored once per digest under
    `TRAINHUB_DATA_DIR/code/<hex>`; `uploads` says which teams sent it."""

    digest = models.CharField(max_length=71, unique=True, help_text="sha256:<hex>")
    size = models.PositiveBigIntegerField()
    format = models.CharField(max_length=8)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = CodeArchiveQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.digest


class CodeUpload(models.Model):
    """One team's upload of an archive (the first one; re-uploads change nothing)."""

    archive = models.ForeignKey(CodeArchive, on_delete=models.CASCADE, related_name="uploads")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="code_uploads")
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["archive", "team"], name="unique_code_upload")
        ]

    def __str__(self) -> str:
        return f"{self.archive_id} by {self.team_id}"
