"""Registered nodes and the tokens that enroll them."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models

from .choices import NodeIsolation, NodeState


class NodeQuerySet(models.QuerySet["Node"]):
    def alive(self, now: datetime) -> NodeQuerySet:
        """Nodes heard from within the liveness grace period."""
        cutoff = now - timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS)
        return self.filter(last_seen__gte=cutoff, credential_revoked_at__isnull=True)

    def lost(self, now: datetime) -> NodeQuerySet:
        """Nodes not heard from within the liveness grace period."""
        cutoff = now - timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS)
        return self.filter(
            models.Q(last_seen__lt=cutoff)
            | models.Q(last_seen__isnull=True)
            | models.Q(credential_revoked_at__isnull=False)
        )


class Node(models.Model):
    hostname = models.CharField(max_length=255)
    address = models.CharField(max_length=255, help_text="Host other nodes reach this one at.")
    cpus = models.FloatField()
    memory_mb = models.PositiveBigIntegerField()
    # [{"index": 0, "model": "...", "memory_mb": 40960, "uuid": "GPU-..."}]
    gpus = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.ACTIVE)
    credential_hash = models.CharField(max_length=128, editable=False)
    # Credentials expire (`nodes.credentials.credential_lifetime`); the agent renews its own
    # at two thirds of the lifetime. The credential it renewed stays valid until
    # `previous_credential_until`, so requests already on their way still pass.
    credential_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    previous_credential_hash = models.CharField(max_length=128, blank=True, editable=False)
    previous_credential_until = models.DateTimeField(null=True, blank=True, editable=False)
    # Set by an admin: no credential of this node is accepted again, and the node counts
    # as lost at once (it gets no new work; what ran there is rescheduled).
    credential_revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    enrolled_at = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    # {"zone": "eu-1"}: given at install (`--labels`), checked by ps_runtime.agent.labels.
    labels = models.JSONField(default=dict, blank=True)
    # From the agent's heartbeats; "none" until the first says otherwise, the safe default
    # (one team at a time on the node).
    isolation = models.CharField(
        max_length=16, choices=NodeIsolation.choices, default=NodeIsolation.NONE
    )
    # Enrolled with a token that `requires_approval`: the node starts cordoned and stays
    # so until an admin approves it (`services.approve_node`, or uncordoning it).
    awaiting_approval = models.BooleanField(default=False, editable=False)
    # Set while `gpus`, `cpus` or `memory_mb` (what the scheduler counts) are less than the
    # node declared at enrollment because its heartbeats report less
    # (`capacity.cap_to_reports`): {"gpus": {"declared": [...], "reported": [0, 1],
    # "since": "<ISO 8601>"}, "cpus": {"declared": 64.0, "reported": 2, "since": ...},
    # "memory_mb": {...}}, each key only while capped; {} when the node offers all it
    # declared.
    capacity_capped = models.JSONField(default=dict, blank=True, editable=False)
    # The trainhub-runtime version the node's agent runs (enrollment, then heartbeats);
    # empty until an agent reports one. The API and the nodes page flag a version other
    # than the server's own (`nodes.selectors.agent_outdated`).
    agent_version = models.CharField(max_length=64, blank=True, default="", editable=False)
    # Jobs in a row whose tasks failed at start here (`quarantine.note_task_end`), the
    # last one's id beside it (a job's own tasks count once: a bug of its own fails them
    # all); a task that ran, an admin's uncordon, reset it. At `NODE_QUARANTINE_AFTER`
    # the node is cordoned and `quarantine_reason` says why until an admin uncordons it.
    start_failures = models.PositiveIntegerField(default=0, editable=False)
    start_failure_job_id = models.PositiveBigIntegerField(null=True, blank=True, editable=False)
    quarantine_reason = models.CharField(max_length=1000, blank=True, default="", editable=False)
    quarantined_at = models.DateTimeField(null=True, blank=True, editable=False)
    # A team whose jobs are placed here first (e.g. it bought the node); others may still
    # use it. Quotas, not ownership, decide how much each team gets.
    owner = models.ForeignKey(
        "tenancy.Team",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="owned_nodes",
        help_text="Team whose jobs prefer this node (optional).",
    )

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.hostname} (#{self.pk})"

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def is_alive(self, now: datetime) -> bool:
        if self.last_seen is None or self.credential_revoked_at is not None:
            return False
        return now - self.last_seen <= timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS)


class EnrollmentToken(models.Model):
    """A secret that lets an agent register a node; stored hashed.

    Every token expires (`nodes.services.create_enrollment_token` sets one hour unless
    told otherwise, at most seven days) and enrolls `max_uses` nodes (one by default), each
    within the token's limits (`max_cpus`, `max_memory_mb`, `max_gpus`, forced `labels`).
    """

    description = models.CharField(max_length=200, blank=True)
    token_hash = models.CharField(max_length=128, unique=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # blank: left empty in the admin, the service gives it the default lifetime.
    expires_at = models.DateTimeField(blank=True)
    max_uses = models.PositiveIntegerField(default=1)
    uses = models.PositiveIntegerField(default=0)
    revoked = models.BooleanField(default=False)
    # Limits on the nodes it enrolls, so a leaked token cannot bring in a node that claims
    # the whole cluster's work: a node declaring more is refused (null: no limit).
    max_cpus = models.FloatField(null=True, blank=True, help_text="Empty: no limit.")
    max_memory_mb = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Empty: no limit."
    )
    max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: no limit.")
    # Labels its nodes get, replacing what the agent claims for these keys.
    labels = models.JSONField(default=dict, blank=True)
    # Its nodes start cordoned, awaiting an admin's approval.
    requires_approval = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.description or f"enrollment token #{self.pk}"
