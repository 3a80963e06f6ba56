"""First-fit gang placement: what the platform's cycle still runs (pure Python, no Django).

The fair-share policy (`trainhub.scheduling.policy.schedule`) needs per-resource borrowing
and lending limits that the tenancy models do not carry yet; until they do, the platform
keeps this behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EPSILON = 1e-9


@dataclass(frozen=True)
class TaskRequest:
    role: str
    index: int
    cpu: float
    memory_mb: int
    gpu: int = 0


@dataclass(frozen=True)
class JobRequest:
    id: int
    tasks: tuple[TaskRequest, ...]


@dataclass
class NodeCapacity:
    id: int
    cpu_free: float
    memory_free_mb: int
    gpus_free: list[int] = field(default_factory=list)
    has_gpus: bool = False

    def fits(self, task: TaskRequest) -> bool:
        return (
            self.cpu_free + EPSILON >= task.cpu
            and self.memory_free_mb >= task.memory_mb
            and len(self.gpus_free) >= task.gpu
        )

    def take(self, task: TaskRequest) -> list[int]:
        self.cpu_free -= task.cpu
        self.memory_free_mb -= task.memory_mb
        taken, self.gpus_free = self.gpus_free[: task.gpu], self.gpus_free[task.gpu :]
        return taken


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[NodeCapacity, ...]
    pending: tuple[JobRequest, ...]  # in the order they should be considered


@dataclass(frozen=True)
class TaskPlacement:
    role: str
    index: int
    node_id: int
    gpu_indices: tuple[int, ...]


@dataclass
class Decisions:
    starts: dict[int, list[TaskPlacement]] = field(default_factory=dict)
    pending_reasons: dict[int, str] = field(default_factory=dict)


def schedule(snapshot: Snapshot) -> Decisions:
    """Place each pending job whole (gang) on the first nodes that fit, in order."""
    nodes = [
        NodeCapacity(n.id, n.cpu_free, n.memory_free_mb, list(n.gpus_free), n.has_gpus)
        for n in snapshot.nodes
    ]
    decisions = Decisions()
    if not nodes:
        for job in snapshot.pending:
            decisions.pending_reasons[job.id] = "no nodes are available"
        return decisions
    for job in snapshot.pending:
        placements = _place_gang(job, nodes)
        if placements is None:
            decisions.pending_reasons[job.id] = _why_not(job, snapshot.nodes)
        else:
            decisions.starts[job.id] = placements
    return decisions


def _place_gang(job: JobRequest, nodes: list[NodeCapacity]) -> list[TaskPlacement] | None:
    """All of the job's tasks, or None leaving `nodes` untouched."""
    trial = [
        NodeCapacity(n.id, n.cpu_free, n.memory_free_mb, list(n.gpus_free), n.has_gpus)
        for n in nodes
    ]
    placements: list[TaskPlacement] = []
    for task in job.tasks:
        # CPU-only tasks keep off GPU nodes while a CPU node fits them.
        candidates = sorted(trial, key=lambda n: (task.gpu == 0 and n.has_gpus, n.id))
        node = next((n for n in candidates if n.fits(task)), None)
        if node is None:
            return None
        placements.append(TaskPlacement(task.role, task.index, node.id, tuple(node.take(task))))
    for real, tried in zip(nodes, trial, strict=True):
        real.cpu_free, real.memory_free_mb, real.gpus_free = (
            tried.cpu_free,
            tried.memory_free_mb,
            tried.gpus_free,
        )
    return placements


def _why_not(job: JobRequest, nodes: tuple[NodeCapacity, ...]) -> str:
    need_cpu = sum(t.cpu for t in job.tasks)
    need_mem = sum(t.memory_mb for t in job.tasks)
    need_gpu = sum(t.gpu for t in job.tasks)
    free_cpu = sum(n.cpu_free for n in nodes)
    free_mem = sum(n.memory_free_mb for n in nodes)
    free_gpu = sum(len(n.gpus_free) for n in nodes)
    if need_gpu > free_gpu:
        return f"not enough free GPUs: needs {need_gpu}, {free_gpu} free"
    if need_cpu > free_cpu + EPSILON:
        return f"not enough free CPU: needs {need_cpu:g}, {free_cpu:g} free"
    if need_mem > free_mem:
        return f"not enough free memory: needs {need_mem} MiB, {free_mem} MiB free"
    return "free resources are fragmented: no placement fits every task"
