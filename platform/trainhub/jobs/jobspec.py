"""The job spec (v1) as typed, immutable data: what every layer after the boundary reads.

`JobSpecSerializer` (spec.py) validates what a person or script sent (API, CLI, web) and
hands back a `JobSpec`; a stored spec (`Job.spec`, JSON) is read back with
`JobSpec.from_dict`, the one place that reads the document by key. Frozen dataclasses
rather than pydantic models: validation stays with DRF (it needs the database for team
membership and node sizes, and its error shape is the API's), so what remains is plain
data, and dataclasses carry it with no dependency and no second validation path.

This module imports no Django, so the scheduler's pure policy and the CLI may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from trainhub.tenancy.resources import Resources

from .stalls import StallSpec

# Priority classes and their CFS weights (DESIGN.md §3); jobs.choices.Priority names them.
PRIORITY_WEIGHTS: dict[str, int] = {
    "experiment": 10,
    "offline": 100,
    "normal": 1000,
    "production": 10000,
}
DEFAULT_PRIORITY = "normal"


# The causes (`jobs.causes`) a spec may name: those after which a restart can help.
# environment_failed fails the same way on any node, and stopped/succeeded are no failure.
RETRY_CAUSES = (
    "node_lost",
    "preempted",
    "transient_network",
    "ps_lost",
    "killed",
    "out_of_memory",
    "disk_full",
    "stalled",
    "user_exception",
    "exit_code",
    "unknown",
)
# Causes that are not the job's doing, and stalls (whose restarts `stall.on_stall` asks
# for, bounded by `retry.max` rather than by the job's own errors' budget).
DEFAULT_RETRY_ON = ("node_lost", "preempted", "transient_network", "ps_lost", "stalled")


@dataclass(frozen=True, slots=True)
class RetrySpec:
    on: tuple[str, ...] = DEFAULT_RETRY_ON
    max: int = 10
    backoff_seconds: float = 10.0
    max_backoff_seconds: float = 300.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RetrySpec:
        data = data or {}
        return cls(
            on=tuple(data.get("on", DEFAULT_RETRY_ON)),
            max=int(data.get("max", 10)),
            backoff_seconds=float(data.get("backoff_seconds", 10.0)),
            max_backoff_seconds=float(data.get("max_backoff_seconds", 300.0)),
        )


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """What one task of a role asks for; `gpu_model` (workers only) restricts its GPUs to
    that model, as the nodes report it (e.g. "NVIDIA A100-SXM4-80GB")."""

    cpu: float = 1.0
    memory_mb: int = 1024
    gpu: int = 0
    gpu_model: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ResourceSpec:
        data = data or {}
        model = data.get("gpu_model")
        return cls(
            cpu=float(data.get("cpu", 1.0)),
            memory_mb=int(data.get("memory_mb", 1024)),
            gpu=int(data.get("gpu", 0)),
            gpu_model=None if model is None else str(model),
        )


@dataclass(frozen=True, slots=True)
class ParameterServersSpec:
    replicas: int = 1
    resources: ResourceSpec = field(default_factory=ResourceSpec)
    # Backups per shard (0-2, below `replicas`): a lost PS is replaced without a restart.
    replication: int = 0


@dataclass(frozen=True, slots=True)
class WorkersSpec:
    min: int = 1
    max: int = 1
    resources: ResourceSpec = field(default_factory=ResourceSpec)


@dataclass(frozen=True, slots=True)
class CoordinatorSpec:
    resources: ResourceSpec = field(default_factory=ResourceSpec)


@dataclass(frozen=True, slots=True)
class EnvironmentSpec:
    """The job's own Python packages, which each node builds once with uv and shares
    read-only between the jobs that ask for the same (docs/design.md "Job environments").
    `python` empty: the nodes' own; `timeout_seconds` ends a build that hangs."""

    requirements: tuple[str, ...] = ()
    python: str = ""
    timeout_seconds: int = 900

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvironmentSpec:
        return cls(
            requirements=tuple(str(r) for r in data.get("requirements") or ()),
            python=str(data.get("python") or ""),
            timeout_seconds=int(data.get("timeout_seconds", 900)),
        )


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A validated job spec (DESIGN.md §2). Build it with `JobSpecSerializer` or
    `from_dict` (for a spec that was validated when it was stored)."""

    name: str
    team: str
    entrypoint: str
    priority: str = DEFAULT_PRIORITY
    args: Mapping[str, Any] = field(default_factory=dict)
    parameter_servers: ParameterServersSpec = field(default_factory=ParameterServersSpec)
    workers: WorkersSpec = field(default_factory=WorkersSpec)
    coordinator: CoordinatorSpec = field(default_factory=CoordinatorSpec)
    freeze_seconds: int = 120
    checkpoint_every_seconds: int = 300
    max_restarts: int = 3
    # An uploaded code archive ("sha256:<hex>", POST /api/v1/code/) put first on the
    # Python path of the job's coordinator and workers; None: the entrypoint is installed.
    code: str | None = None
    # The job's own Python environment; None: the runtime's packages only.
    environment: EnvironmentSpec | None = None
    # Which causes restart the job outside max_restarts, how often, how soon.
    retry: RetrySpec = field(default_factory=RetrySpec)
    # When the running job counts as stalled, and what then happens (`jobs.stalls`).
    stall: StallSpec = field(default_factory=StallSpec)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """Read a spec document that was validated before (a stored `Job.spec`)."""
        ps = data.get("parameter_servers") or {}
        workers = data.get("workers") or {}
        coordinator = data.get("coordinator") or {}
        low = int(workers.get("min", 1))
        return cls(
            name=str(data["name"]),
            team=str(data["team"]),
            entrypoint=str(data["entrypoint"]),
            priority=str(data.get("priority", DEFAULT_PRIORITY)),
            args=dict(data.get("args") or {}),
            parameter_servers=ParameterServersSpec(
                replicas=int(ps.get("replicas", 1)),
                resources=ResourceSpec.from_dict({"gpu": 0, **(ps.get("resources") or {})}),
                replication=int(ps.get("replication", 0)),
            ),
            workers=WorkersSpec(
                min=low,
                max=int(workers.get("max", low)),
                resources=ResourceSpec.from_dict(workers.get("resources")),
            ),
            coordinator=CoordinatorSpec(
                resources=ResourceSpec.from_dict(
                    {"gpu": 0, **(coordinator.get("resources") or {})}
                ),
            ),
            freeze_seconds=int(data.get("freeze_seconds", 120)),
            checkpoint_every_seconds=int(data.get("checkpoint_every_seconds", 300)),
            max_restarts=int(data.get("max_restarts", 3)),
            code=str(data["code"]) if data.get("code") else None,
            environment=(
                EnvironmentSpec.from_dict(data["environment"]) if data.get("environment") else None
            ),
            retry=RetrySpec.from_dict(data.get("retry")),
            stall=StallSpec.from_dict(data.get("stall")),
        )

    def request(self, workers: int | None = None) -> Resources:
        """What a job with this spec asks for in all: its coordinator, every PS shard and
        `workers` workers (default: the spec's minimum)."""
        coordinator, ps, worker = (
            self.coordinator.resources,
            self.parameter_servers,
            self.workers.resources,
        )
        count = self.workers.min if workers is None else workers
        return Resources(
            cpu=coordinator.cpu + ps.replicas * ps.resources.cpu + count * worker.cpu,
            memory_mb=coordinator.memory_mb
            + ps.replicas * ps.resources.memory_mb
            + count * worker.memory_mb,
            gpu=count * worker.gpu,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON document stored in `Job.spec` and shown by the API. Coordinator and PS
        resources carry no `gpu` (those roles never get GPUs); `gpu_model` is there only
        when set."""
        data = asdict(self)
        data["args"] = dict(self.args)
        data["retry"]["on"] = list(self.retry.on)
        for role in ("parameter_servers", "coordinator"):
            del data[role]["resources"]["gpu"]
            del data[role]["resources"]["gpu_model"]
        if self.workers.resources.gpu_model is None:
            del data["workers"]["resources"]["gpu_model"]
        if self.code is None:
            del data["code"]  # specs without code read as they always did
        if self.environment is None:
            del data["environment"]
        else:
            data["environment"]["requirements"] = list(self.environment.requirements)
        return data
