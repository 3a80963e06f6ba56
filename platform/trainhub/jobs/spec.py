"""Validation of the job spec (v1, DESIGN.md §2): every error names its field.

This is the boundary: what a person or script sent (API, CLI, web) comes in as a document,
`parse_job_spec` (or `JobSpecSerializer(...).spec`) hands back a typed `JobSpec`, and
everything after it reads attributes.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from ps_runtime.archives import is_digest
from ps_runtime.shards.replicas import MAX_REPLICATION
from trainhub.strictjson import StrictSerializer
from trainhub.tenancy.models import Quota, Team
from trainhub.tenancy.selectors import can_submit, role_in

from .capacity import check_fits_cluster, cluster_capacity
from .choices import Priority
from .codearchives import usable_by
from .jobspec import JobSpec
from .specenv import EnvironmentSerializer, add_archive_requirements
from .specretry import RetrySerializer
from .specstall import StallSerializer
from .usage import job_request

_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class ResourcesSerializer(StrictSerializer):
    cpu = serializers.FloatField(
        min_value=0.1,
        max_value=1024,
        default=1.0,
        help_text="CPU cores of each task of this role (fractions allowed).",
    )
    memory_mb = serializers.IntegerField(
        min_value=64,
        max_value=16 * 1024 * 1024,
        default=1024,
        help_text="Memory of each task of this role, in MiB.",
    )
    gpu = serializers.IntegerField(
        min_value=0, max_value=64, default=0, help_text="GPUs of each worker."
    )
    # A GPU model as the nodes report it; checked against the registered nodes.
    gpu_model = serializers.CharField(
        max_length=200,
        required=False,
        help_text="Only GPUs of this model, spelled as the nodes report it "
        "(GET /api/v1/nodes/); needs gpu of at least 1. A model no node has is refused.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "gpu_model" in attrs and attrs.get("gpu", 0) < 1:
            raise serializers.ValidationError(
                {"gpu_model": ["A GPU model needs 'gpu' of at least 1."]}
            )
        return attrs


class CpuResourcesSerializer(ResourcesSerializer):
    """Resources of roles that never get GPUs (coordinator, parameter servers)."""

    gpu = None  # type: ignore[assignment]
    gpu_model = None  # type: ignore[assignment]


class ParameterServersSerializer(StrictSerializer):
    replicas = serializers.IntegerField(
        min_value=1, max_value=64, default=1, help_text="Parameter servers (PS shards)."
    )
    resources = CpuResourcesSerializer(
        required=False, help_text="What each parameter server gets (no GPUs)."
    )
    replication = serializers.IntegerField(
        min_value=0,
        max_value=MAX_REPLICATION,
        default=0,
        help_text="Backups of each PS shard on the next servers (0-2, fewer than replicas): "
        "a lost parameter server is replaced while the job runs on.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        replicas, replication = attrs.get("replicas", 1), attrs.get("replication", 0)
        if replication and replication >= replicas:
            raise serializers.ValidationError(
                {
                    "replication": [
                        f"Replication {replication} needs at least {replication + 1} "
                        f"parameter servers (replicas is {replicas}): each shard lives on "
                        f"its server and the next {replication}."
                    ]
                }
            )
        return attrs


class WorkersSerializer(StrictSerializer):
    min = serializers.IntegerField(
        min_value=1,
        max_value=1024,
        default=1,
        help_text="Workers the job starts with; it never runs with fewer.",
    )
    max = serializers.IntegerField(
        min_value=1,
        max_value=1024,
        required=False,
        help_text="Workers it may grow to (idle capacity, `trainhub scale`); "
        "at least min, which it is when left out.",
    )
    resources = ResourcesSerializer(required=False, help_text="What each worker gets.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("max", attrs["min"])
        if attrs["max"] < attrs["min"]:
            raise serializers.ValidationError(
                {"max": [f"max ({attrs['max']}) must be at least min ({attrs['min']})."]}
            )
        return attrs


class CoordinatorSerializer(StrictSerializer):
    resources = CpuResourcesSerializer(
        required=False, help_text="What the coordinator gets (no GPUs)."
    )


def _defaults(serializer_class: type[serializers.Serializer[Any]]) -> dict[str, Any]:
    """What a section holds when the spec omits it: every field at its default."""
    serializer = serializer_class(data={})
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


_SECTIONS: dict[
    str, tuple[type[serializers.Serializer[Any]], type[serializers.Serializer[Any]]]
] = {
    "parameter_servers": (ParameterServersSerializer, CpuResourcesSerializer),
    "workers": (WorkersSerializer, ResourcesSerializer),
    "coordinator": (CoordinatorSerializer, CpuResourcesSerializer),
}


def parse_job_spec(data: Any, *, user: object) -> JobSpec:
    """Validate a spec document sent by `user` and return it typed.

    Raises:
        serializers.ValidationError: a field is unknown, of the wrong type, out of range,
            names a team `user` may not submit to, or asks for more than a node, the
            whole cluster (`capacity.check_fits_cluster`) or its team could ever give;
            the error's detail names the field.
    """
    serializer = JobSpecSerializer(data=data, context={"user": user})
    serializer.is_valid(raise_exception=True)
    return serializer.spec


class JobSpecSerializer(StrictSerializer):
    """The job spec's validator. Context: `user` (the submitter), or a DRF `request`."""

    name = serializers.RegexField(
        _NAME,
        max_length=100,
        error_messages={
            "invalid": "Use letters, digits, '.', '_' or '-', starting with a letter or digit."
        },
        help_text="The job's name: letters, digits, '.', '_' or '-', starting with a letter "
        "or digit.",
    )
    team = serializers.SlugField(
        max_length=63,
        help_text="The slug of the team the job runs for; the submitter must be a member "
        "who may submit (not a viewer).",
    )
    priority = serializers.ChoiceField(
        choices=Priority.choices,
        default=Priority.NORMAL,
        help_text="Within its team, higher priorities go first (weights 10, 100, 1000 and "
        "10000); production jobs never borrow quota and are never preempted.",
    )
    entrypoint = serializers.RegexField(
        _ENTRYPOINT,
        max_length=300,
        error_messages={
            "invalid": "Expected 'module:function', e.g. 'ps_runtime.examples.movielens:train'."
        },
        help_text="The `module:function` the coordinator runs, from the runtime, the "
        "nodes' packages or the job's `code`.",
    )
    args = serializers.DictField(
        required=False,
        default=dict,
        help_text="Keyword arguments of the entrypoint (a JSON object).",
    )
    parameter_servers = ParameterServersSerializer(
        required=False, help_text="The parameter servers: how many, and what each gets."
    )
    workers = WorkersSerializer(
        required=False, help_text="The workers: how many (elastic between min and max)."
    )
    coordinator = CoordinatorSerializer(
        required=False, help_text="The coordinator, the one task that runs the entrypoint."
    )
    freeze_seconds = serializers.IntegerField(
        min_value=0,
        max_value=86400,
        default=120,
        help_text="No rescaling within this many seconds after a change.",
    )
    checkpoint_every_seconds = serializers.IntegerField(
        min_value=0,
        max_value=86400,
        default=300,
        help_text="The least time between the coordinator's periodic checkpoints.",
    )
    max_restarts = serializers.IntegerField(
        min_value=0,
        max_value=100,
        default=3,
        help_text="Restarts after the job's own errors; the causes in retry.on spend "
        "retry.max instead.",
    )
    code = serializers.CharField(
        max_length=71,
        required=False,
        allow_null=True,
        default=None,
        help_text="An uploaded code archive, `sha256:<64 hex digits>` as POST /api/v1/code/ "
        "answered; first on the coordinator's and the workers' Python path.",
    )
    environment = EnvironmentSerializer(
        required=False,
        allow_null=True,
        default=None,
        help_text="The job's own Python packages, built on each node with uv; null: the "
        "runtime's packages only.",
    )
    retry = RetrySerializer(
        required=False, help_text="Restarts after causes that are not the job's doing."
    )
    stall = StallSerializer(
        required=False,
        help_text="When the running job counts as stalled, and what then happens.",
    )

    def validate_code(self, value: str | None) -> str | None:
        if not value:
            return None
        if not is_digest(value):
            raise serializers.ValidationError(
                "Expected 'sha256:<64 hex digits>', the digest POST /api/v1/code/ answered."
            )
        if not usable_by(value, self._user()):
            raise serializers.ValidationError(
                f"No code archive {value} was uploaded by your teams; upload it with "
                "POST /api/v1/code/ (or `trainhub submit --code DIR`)."
            )
        return value

    def _user(self) -> Any:
        return self.context.get("user") or getattr(self.context.get("request"), "user", None)

    def validate_args(self, value: dict[str, Any]) -> dict[str, Any]:
        _no_null_characters(value)
        return value

    def validate_team(self, value: str) -> str:
        user = self.context.get("user") or getattr(self.context.get("request"), "user", None)
        team = Team.objects.filter(slug=value).first()
        if team is None or (
            not getattr(user, "is_superuser", False) and role_in(user, team) is None
        ):
            raise serializers.ValidationError(f"You are not a member of team '{value}'.")
        if not team.is_active:
            raise serializers.ValidationError(
                f"Team '{value}' is deactivated; a platform admin can reactivate it."
            )
        if not can_submit(user, team):
            raise serializers.ValidationError(f"Viewers of team '{value}' cannot submit jobs.")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        for section, (section_class, resources_class) in _SECTIONS.items():
            attrs[section] = dict(attrs.get(section) or _defaults(section_class))
            attrs[section]["resources"] = dict(
                attrs[section].get("resources") or _defaults(resources_class)
            )
        add_archive_requirements(attrs)
        spec = JobSpec.from_dict(attrs)
        check_fits_cluster(spec, cluster_capacity())
        _check_fits_team_quota(spec)
        return attrs

    @property
    def spec(self) -> JobSpec:
        """The validated spec, typed (call `is_valid()` first)."""
        return JobSpec.from_dict(self.validated_data)


def _no_null_characters(data: Any) -> None:
    """PostgreSQL's JSON cannot store NUL characters: refuse them instead of failing."""
    if isinstance(data, dict):
        for key, value in data.items():
            _no_null_characters(key)
            _no_null_characters(value)
    elif isinstance(data, list):
        for value in data:
            _no_null_characters(value)
    elif isinstance(data, str) and "\x00" in data:
        raise serializers.ValidationError("Null characters are not allowed.")


_UNITS = {"cpu": "CPUs", "memory_mb": "MiB of memory", "gpu": "GPUs"}


def _check_fits_team_quota(spec: JobSpec) -> None:
    """Reject a job that even at its smallest size needs more than its team may ever use:
    the nominal quota plus the borrowing limit (production jobs never borrow: the nominal
    quota alone). A resource without a borrowing limit bounds only production jobs (the
    others borrow what the cluster has, and nodes can be added).
    """
    quota = Quota.objects.filter(team__slug=spec.team).first()
    if quota is None:
        return
    production = spec.priority == Priority.PRODUCTION
    need = job_request(spec)
    for name, unit in _UNITS.items():
        limit = 0 if production else getattr(quota, f"borrowing_limit_{name}")
        if limit is None:
            continue
        nominal = getattr(quota, name)
        asked = getattr(need, name)
        if asked > nominal + limit + 1e-9:
            ceiling = (
                f"its quota of {nominal:g} (production jobs never borrow)"
                if production
                else f"its quota of {nominal:g} plus its borrowing limit of {limit:g}"
            )
            raise serializers.ValidationError(
                {
                    "team": [
                        f"This job needs at least {asked:g} {unit} (its coordinator, "
                        f"{spec.parameter_servers.replicas} parameter servers and "
                        f"{spec.workers.min} workers), but team '{spec.team}' may never use "
                        f"more than {nominal + limit:g}: {ceiling}. Make the job smaller, "
                        "or ask a team admin for more quota."
                    ]
                }
            )
