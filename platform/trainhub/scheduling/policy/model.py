"""What the policy reads (a snapshot) and what it writes (decisions): plain frozen data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Shared with the platform, so the policy and the quotas it enforces compute alike; both
# modules are pure Python (import-linter checks that the policy reaches no Django).
from trainhub.jobs.jobspec import PRIORITY_WEIGHTS as PRIORITY_WEIGHTS
from trainhub.tenancy.resources import EPSILON as EPSILON
from trainhub.tenancy.resources import UNLIMITED as UNLIMITED
from trainhub.tenancy.resources import ZERO as ZERO
from trainhub.tenancy.resources import Resources as Resources

PRODUCTION = "production"

# Node states as the policy sees them; only READY nodes get new tasks.
READY, CORDONED, LOST = "ready", "cordoned", "lost"
# Job states as the policy sees them. STOPPING: preempted, its tasks still checkpointing.
PENDING, RUNNING, STOPPING = "pending", "running", "stopping"
COORDINATOR, PS, WORKER = "coordinator", "ps", "worker"


@dataclass(frozen=True, slots=True)
class ModelResources(Resources):
    """Resources whose GPUs must all be of one model (a worker's `resources.gpu_model`,
    or a running task's GPUs, all of one model). Sums and differences are plain
    `Resources`: quotas count GPUs, not models."""

    gpu_model: str | None = None


def gpu_model_of(res: Resources) -> str | None:
    """The GPU model `res` is bound to, or None for any model (or no GPUs)."""
    if res.gpu <= 0 or not isinstance(res, ModelResources):
        return None
    return res.gpu_model


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    capacity: Resources
    state: str = READY
    owner: str | None = None  # a team whose jobs prefer this node; others may use it too
    labels: Mapping[str, str] = field(default_factory=dict)
    # How many GPUs of each model the node has ({"NVIDIA A100-SXM4-80GB": 8}); their sum
    # is `capacity.gpu` when known. Empty: models unknown (only model-free work fits).
    gpu_models: Mapping[str, int] = field(default_factory=dict)
    # False when the node's agent cannot isolate tasks (isolation "none"): it then hosts
    # the tasks of one team at a time.
    isolated: bool = True

    @property
    def has_gpus(self) -> bool:
        return self.capacity.gpu > 0


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    nominal: Resources
    # Per resource; math.inf (the default) means no limit.
    borrowing_limit: Resources = UNLIMITED
    lending_limit: Resources = UNLIMITED


@dataclass(frozen=True, slots=True)
class Task:
    role: str
    index: int
    node_id: int
    resources: Resources
    borrowed: bool = False  # placed on quota lent by another team
    stopping: bool = False  # being removed; holds its resources until it is gone


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    team: str
    priority: str
    state: str
    submit_time: float
    worker: Resources
    workers_min: int = 1
    workers_max: int = 1
    ps_count: int = 0
    ps: Resources = ZERO
    coordinator: Resources = ZERO  # zero: the job has no coordinator task
    freeze_seconds: float = 0.0
    tasks: tuple[Task, ...] = ()
    vruntime: float = 0.0  # resources held x time / priority weight, accrued by the driver
    last_rescale_time: float | None = None
    started_at: float | None = None
    pending_since: float | None = None  # start of the current wait; None: submit_time
    # The job saves a checkpoint every this many seconds of running; a preemption loses
    # the work since the last one. `last_checkpoint_at` None: estimated from `started_at`.
    checkpoint_every_seconds: float = 300.0
    last_checkpoint_at: float | None = None
    preemptions: int = 0  # times preempted so far
    # Backups of each PS shard: a job with some can have a server moved while it runs.
    ps_replication: int = 0
    # Nodes where this job's tasks just failed at start: placing it again prefers others
    # (`Capacity.place_gang`), and uses these only when nothing else fits.
    avoid_nodes: frozenset[int] = frozenset()
    # Borrowed capacity is taken back from such jobs first (an experiment's trials).
    reclaim_first: bool = False

    @property
    def weight(self) -> int:
        return PRIORITY_WEIGHTS[self.priority]

    @property
    def is_production(self) -> bool:
        return self.priority == PRODUCTION

    def work_at_risk(self, now: float) -> float:
        """Seconds of work a preemption now would lose (since the last checkpoint)."""
        if self.started_at is None:
            return 0.0
        last = self.last_checkpoint_at
        if last is None:
            every = self.checkpoint_every_seconds
            ran = max(0.0, now - self.started_at)
            last = self.started_at + (ran // every) * every if every > 0 else self.started_at
        return max(0.0, now - last)

    @property
    def is_elastic(self) -> bool:
        return self.workers_max > self.workers_min

    def gang(self) -> tuple[tuple[str, int, Resources], ...]:
        """The tasks that must start together: coordinator, every PS shard, min workers."""
        tasks: list[tuple[str, int, Resources]] = []
        if not self.coordinator.is_zero:
            tasks.append((COORDINATOR, 0, self.coordinator))
        tasks += [(PS, i, self.ps) for i in range(self.ps_count)]
        tasks += [(WORKER, i, self.worker) for i in range(self.workers_min)]
        return tuple(tasks)

    def demand(self) -> Resources:
        return self.coordinator + self.ps.times(self.ps_count) + self.worker.times(self.workers_min)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity freed for a pending job, held for it until it starts."""

    job_id: int
    node_id: int
    resources: Resources
    created_at: float


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    # A pending job rises one priority level per this many seconds of waiting.
    aging_seconds_per_level: float = 900.0
    preemption_grace_seconds: float = 60.0
    reservation_timeout_seconds: float = 900.0
    # CPU-only tasks on a GPU node leave this many CPUs beside each of its free GPUs.
    cpu_reserved_per_free_gpu: float = 1.0
    # Bounds the work spent trying to free room for blocked jobs in one cycle.
    max_make_room_attempts: int = 32
    # A job started on borrowed quota runs at least this long before it gives way to
    # anyone but the quota's owner.
    min_borrowed_run_seconds: float = 600.0
    # A job preempted this many times no longer starts on borrowed quota.
    borrow_preemption_limit: int = 3


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    jobs: tuple[Job, ...]
    reservations: tuple[Reservation, ...] = ()
    config: PolicyConfig = PolicyConfig()


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    role: str
    index: int
    node_id: int
    resources: Resources
    borrowed: bool = False


@dataclass(frozen=True, slots=True)
class StartJob:
    job_id: int
    tasks: tuple[TaskPlacement, ...]


@dataclass(frozen=True, slots=True)
class AddWorker:
    job_id: int
    task: TaskPlacement


@dataclass(frozen=True, slots=True)
class RemoveWorker:
    job_id: int
    index: int
    node_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class MoveServer:
    """Place parameter server `index` of a running job with replicated shards on another
    node: its replacement copies its shards from a live replica while the old one stops."""

    job_id: int
    index: int
    from_node_id: int
    to_node_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class PreemptJob:
    job_id: int
    grace_seconds: float
    reason: str


@dataclass
class Decisions:
    starts: list[StartJob] = field(default_factory=list)
    add_workers: list[AddWorker] = field(default_factory=list)
    remove_workers: list[RemoveWorker] = field(default_factory=list)
    preemptions: list[PreemptJob] = field(default_factory=list)
    move_servers: list[MoveServer] = field(default_factory=list)
    pending_reasons: dict[int, str] = field(default_factory=dict)
    # The complete set to carry into the next snapshot (old ones not listed are released).
    reservations: list[Reservation] = field(default_factory=list)
