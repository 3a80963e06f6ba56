"""Experiments (a hyperparameter search over one job spec) and their trials."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import models

from trainhub.jobs.choices import Priority
from trainhub.jobs.models import Job
from trainhub.tenancy.models import Team

from .searchspec import SearchSpec


class ExperimentState(models.TextChoices):
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


EXPERIMENT_ENDED = frozenset(
    {ExperimentState.SUCCEEDED, ExperimentState.FAILED, ExperimentState.CANCELLED}
)


class TrialState(models.TextChoices):
    # Toward its rung: queued or placed; it holds one of the experiment's slots.
    RUNNING = "running", "Running"
    # Completed its rung and stopped with a checkpoint; may be promoted (ASHA).
    WAITING = "waiting", "Waiting at its rung"
    COMPLETED = "completed", "Completed"
    # Never promoted: the search ended while it waited at a lower rung.
    STOPPED = "stopped", "Stopped early"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


TRIAL_ENDED = frozenset(
    {TrialState.COMPLETED, TrialState.STOPPED, TrialState.FAILED, TrialState.CANCELLED}
)


class ExperimentQuerySet(models.QuerySet["Experiment"]):
    def visible_to(self, user: Any) -> ExperimentQuerySet:
        if getattr(user, "is_superuser", False):
            return self.all()
        return self.filter(team__memberships__user=user)


class Experiment(models.Model):
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="experiments")
    name = models.CharField(max_length=100)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    priority = models.CharField(max_length=16, choices=Priority.choices, default=Priority.NORMAL)
    spec = models.JSONField(help_text="Each trial's job spec (v1), before its values.")
    search = models.JSONField(help_text="The search block, with every default filled in.")
    state = models.CharField(
        max_length=16, choices=ExperimentState.choices, default=ExperimentState.RUNNING
    )
    # What the experiment waits for while it runs (its trials' own reasons).
    pending_reason = models.CharField(max_length=300, blank=True)
    message = models.TextField(blank=True, help_text="Why it ended, in words.")
    best_trial = models.ForeignKey(
        "Trial", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    best_metric = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ExperimentQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["team", "state"])]

    def __str__(self) -> str:
        return f"{self.name} (experiment {self.pk})"

    @cached_property
    def search_spec(self) -> SearchSpec:
        return SearchSpec.from_dict(self.search)

    @property
    def ended(self) -> bool:
        return self.state in EXPERIMENT_ENDED


class Trial(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveIntegerField()
    params = models.JSONField(help_text="The sampled values, passed to the job as arguments.")
    state = models.CharField(max_length=16, choices=TrialState.choices, default=TrialState.RUNNING)
    # The rung it runs toward (running) or completed last (waiting, completed).
    rung = models.PositiveIntegerField(default=0)
    # The metric at the end of each completed rung: {"0": 0.98, "1": 0.95}.
    results = models.JSONField(default=dict, blank=True)
    best_metric = models.FloatField(null=True, blank=True)
    # Budget units (epochs or steps) completed, over every run of the trial.
    budget_done = models.PositiveBigIntegerField(default=0)
    # Each run of the trial is a job; later runs continue the first one's checkpoints.
    first_job = models.ForeignKey(Job, null=True, on_delete=models.SET_NULL, related_name="+")
    job = models.ForeignKey(Job, null=True, on_delete=models.SET_NULL, related_name="+")
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["experiment_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["experiment", "number"], name="experiments_trial_number"
            )
        ]

    def __str__(self) -> str:
        return f"trial {self.number} of experiment {self.experiment_id}"

    def result_at(self) -> dict[int, float]:
        """Results by rung number."""
        return {int(k): float(v) for k, v in self.results.items()}

    def run_jobs(self) -> models.QuerySet[Job]:
        """Every job that ran this trial, first to last."""
        if self.first_job_id is None:
            return Job.objects.none()
        return Job.objects.filter(
            models.Q(pk=self.first_job_id) | models.Q(checkpoints_of_id=self.first_job_id)
        ).order_by("id")
