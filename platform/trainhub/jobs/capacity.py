"""What the cluster's nodes can ever hold, and whether a job could ever fit in it.

The cluster's capacity is that of its registered nodes, less those that cannot return
to work: a node whose credential was revoked (it must enroll again) or that is being
drained (taken out of service). Cordoned nodes and nodes not heard from lately still
count: they are expected back. A cluster with no such node refuses nothing for its size:
nodes may join later (a scripted setup submits before its agents enroll), and the job
waits with a pending reason until one does.

Used by the spec's validation (`spec.JobSpecSerializer`, so the API, the CLI, the web form
and its "Check" refuse alike), by the submit form's defaults (`sized_to_fit`), and by the
scheduling cycle, which words the same verdict as the pending reason of a job accepted
before the cluster shrank (`never_fits`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rest_framework import serializers

from trainhub.nodes.choices import NodeState
from trainhub.nodes.models import Node
from trainhub.tenancy.models import Quota
from trainhub.tenancy.resources import EPSILON, RESOURCE_NAMES, Resources

from .jobspec import JobSpec, ResourceSpec


@dataclass(frozen=True)
class ClusterCapacity:
    """The counted nodes' capacity: in all, and the most any one node has (per resource)."""

    nodes: int = 0
    total: Resources = field(default_factory=Resources)
    largest: Resources = field(default_factory=Resources)
    # Each counted node's GPUs as it reports them ([{"index", "model", ...}, ...]).
    node_gpus: tuple[tuple[dict[str, Any], ...], ...] = ()


def cluster_capacity() -> ClusterCapacity:
    """The capacity of the nodes that can take work now or later (see the module's doc)."""
    rows = list(
        Node.objects.filter(credential_revoked_at__isnull=True)
        .exclude(state=NodeState.DRAINING)
        .values_list("cpus", "memory_mb", "gpus")
    )
    total, largest = Resources(), Resources()
    for cpus, memory_mb, gpus in rows:
        node = Resources(float(cpus), int(memory_mb), len(gpus or ()))
        total += node
        largest = Resources(
            *(max(a, b) for a, b in zip(largest.as_tuple(), node.as_tuple(), strict=True))
        )
    return ClusterCapacity(
        nodes=len(rows),
        total=total,
        largest=largest,
        node_gpus=tuple(tuple(gpus or ()) for _, _, gpus in rows),
    )


class TaskSize(Protocol):
    """What one task asks for: a spec's `ResourceSpec`, or the policy's `Resources`."""

    @property
    def cpu(self) -> float: ...
    @property
    def memory_mb(self) -> float: ...
    @property
    def gpu(self) -> float: ...


# Per role ("workers", "parameter_servers", "coordinator", in this order): the number of
# its tasks in the gang at the job's smallest size, and what each of them asks for.
Gang = Mapping[str, tuple[int, TaskSize]]


def gang_of(spec: JobSpec) -> dict[str, tuple[int, ResourceSpec]]:
    """Each role's task count in the gang (workers at their minimum) and task size."""
    return {
        "workers": (spec.workers.min, spec.workers.resources),
        "parameter_servers": (spec.parameter_servers.replicas, spec.parameter_servers.resources),
        "coordinator": (1, spec.coordinator.resources),
    }


@dataclass(frozen=True)
class Shortfall:
    """One way a gang exceeds what the counted nodes could ever hold: a task of `role`
    needs more of `name` than the largest node has (`per_task`), or the whole gang more
    than all the nodes together (`role`: the one asking for most of it)."""

    role: str
    name: str
    need: float
    have: float
    per_task: bool


def task_shortfalls(
    gang: Gang, capacity: ClusterCapacity, names: tuple[str, ...] = RESOURCE_NAMES
) -> list[Shortfall]:
    """Each role's task, per resource of `names`, larger than the largest node."""
    limits = [(name, getattr(capacity.largest, name)) for name in names]
    found = []
    for role, (_, task) in gang.items():
        for name, have in limits:
            asked = getattr(task, name)
            if asked > have + EPSILON:
                found.append(Shortfall(role, name, asked, have, per_task=True))
    return found


def gang_shortfalls(gang: Gang, capacity: ClusterCapacity) -> list[Shortfall]:
    """Each resource the gang at its smallest size needs more of than the whole cluster."""
    found = []
    for name in RESOURCE_NAMES:
        need, have = 0.0, getattr(capacity.total, name)
        for count, task in gang.values():
            need += count * getattr(task, name)
        if need > have + EPSILON:
            # Beside the role asking for the most (ties: workers, then PS servers).
            parts = {role: count * getattr(task, name) for role, (count, task) in gang.items()}
            role = max(parts, key=lambda r: parts[r])
            found.append(Shortfall(role, name, need, have, per_task=False))
    return found


def _error(section: str, name: str, message: str) -> dict[str, Any]:
    return {section: {"resources": {name: [message]}}}


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value


def _amount(name: str, value: float) -> str:
    if name == "memory_mb":
        return f"{value:g} MiB of memory"
    unit = "CPU" if name == "cpu" else "GPU"
    return f"{value:g} {unit}{'' if value == 1 else 's'}"


def _nodes(capacity: ClusterCapacity) -> str:
    return f"{capacity.nodes} node{'' if capacity.nodes == 1 else 's'}"


def check_fits_cluster(spec: JobSpec, capacity: ClusterCapacity) -> None:
    """Refuse a job that no counted node, or not all of them together, could ever hold.

    Raises:
        serializers.ValidationError: a task is larger than the largest node (under that
            role's resource field), or the gang at its minimum size needs more than the
            whole cluster has (under the field of the role that asks for most of it).
    """
    gpu, model = spec.workers.resources.gpu, spec.workers.resources.gpu_model
    if model is not None:
        _check_gpu_model(model, gpu, capacity.node_gpus)
    if gpu > capacity.largest.gpu:
        raise serializers.ValidationError(
            _error(
                "workers",
                "gpu",
                f"{gpu} GPUs per worker requested, but the largest node has "
                f"{capacity.largest.gpu:g}.",
            )
        )
    if capacity.nodes == 0:
        return  # no nodes yet: the job waits for one, with a pending reason
    gang = gang_of(spec)
    errors: dict[str, Any] = {}
    for s in task_shortfalls(gang, capacity, ("cpu", "memory_mb")):
        message = (
            f"{_amount(s.name, s.need)} per task requested, but the largest node "
            f"has {_amount(s.name, s.have)}."
        )
        _merge(errors, _error(s.role, s.name, message))
    if errors:
        raise serializers.ValidationError(errors)
    for s in gang_shortfalls(gang, capacity):
        breakdown = ", ".join(
            _tasks(role, count, getattr(task, s.name))
            for role, (count, task) in reversed(gang.items())
            if getattr(task, s.name)
        )
        message = (
            f"This job needs {_amount(s.name, s.need)} in all at its smallest size "
            f"({breakdown}), but the whole cluster has {s.have:g} ({_nodes(capacity)}), so "
            "it could never start. Ask for less per task, or fewer workers (workers.min) or "
            "parameter servers, or add nodes."
        )
        _merge(errors, _error(s.role, s.name, message))
    if errors:
        raise serializers.ValidationError(errors)


# The start of every `never_fits` reason (`scheduling/reasons.py` groups them by it).
NEVER_FITS = "can never start on this cluster"
_ONE_TASK = {"workers": "a worker", "parameter_servers": "a parameter server"}


def never_fits(gang: Gang, capacity: ClusterCapacity) -> str:
    """Why a job already accepted can never start ("" when it could): what
    `check_fits_cluster` refuses at submission, as a pending reason, for a job accepted
    before a node was drained, revoked or removed (or before that check existed), which
    would otherwise wait forever behind a reason that promises it a turn.

    Compares against the counted nodes only (no database): the scheduling cycle reads
    `cluster_capacity()` once and asks this of each job its policy left waiting.
    """
    if capacity.nodes == 0:
        return ""  # nodes may join later: the policy's reason ("no nodes are available")
    found = task_shortfalls(gang, capacity) or gang_shortfalls(gang, capacity)
    if not found:
        return ""
    s = found[0]
    if s.per_task:
        return (
            f"{NEVER_FITS}: {_ONE_TASK.get(s.role, 'its coordinator')} needs "
            f"{_amount(s.name, s.need)}, the largest node has {_amount(s.name, s.have)}; "
            "cancel it and submit a smaller one, or add a larger node"
        )
    return (
        f"{NEVER_FITS}: it needs {_amount(s.name, s.need)} in all at its smallest size, the "
        f"whole cluster has {s.have:g} ({_nodes(capacity)}); cancel it and submit a smaller "
        "one, or add nodes"
    )


_NOUNS = {
    "parameter_servers": ("parameter server", "parameter servers"),
    "workers": ("worker", "workers"),
}


def _tasks(section: str, count: int, each: float) -> str:
    """E.g. "coordinator 1", "1 worker of 0.5", "3 parameter servers of 1024 each"."""
    if section == "coordinator":
        return f"coordinator {each:g}"
    return f"{count} {_NOUNS[section][count != 1]} of {each:g}" + (" each" if count != 1 else "")


def _check_gpu_model(
    model: str, gpu: int, node_gpus: tuple[tuple[dict[str, Any], ...], ...]
) -> None:
    """Reject a GPU model that no node has `gpu` of."""
    per_node = [sum(1 for g in gpus if g.get("model") == model) for gpus in node_gpus]
    most = max(per_node, default=0)
    if most >= gpu:
        return
    known = sorted({str(g.get("model")) for gpus in node_gpus for g in gpus})
    if most == 0:
        have = "no node has it; models: " + (", ".join(known) if known else "none registered")
    else:
        have = f"the most any node has is {most}"
    raise serializers.ValidationError(
        _error("workers", "gpu_model", f"{gpu} '{model}' GPUs per worker requested, but {have}.")
    )


# How the submit form's default job shares out what it may use, per role (all of it).
_SHARES = {"workers": 0.5, "parameter_servers": 0.25, "coordinator": 0.25}
_STEPS = {"cpu": 0.1, "memory_mb": 64}  # also each resource's smallest request


def _room(team: str, capacity: ClusterCapacity) -> Resources | None:
    """What one job of `team` may use at most: the largest node, within the team's
    quota plus borrowing limit where it has one. None: no counted node yet."""
    if capacity.nodes == 0:
        return None
    room = capacity.largest
    quota = Quota.objects.filter(team__slug=team).first()
    if quota is not None:
        bounds = []
        for name in ("cpu", "memory_mb", "gpu"):
            limit = getattr(quota, f"borrowing_limit_{name}")
            have = getattr(room, name)
            bounds.append(have if limit is None else min(have, getattr(quota, name) + limit))
        room = Resources(*bounds)
    return room


def sized_to_fit(spec: JobSpec, capacity: ClusterCapacity | None = None) -> JobSpec:
    """`spec` with its tasks made smaller, where its gang at its minimum size would not
    fit the largest node (or its team's ceiling): per resource, the workers share half of
    what there is, the parameter servers and the coordinator a quarter each. What already
    fits, and any spec while the cluster has no nodes, is returned unchanged."""
    capacity = cluster_capacity() if capacity is None else capacity
    room = _room(spec.team, capacity)
    if room is None:
        return spec
    roles = gang_of(spec)
    sized = {section: task for section, (_, task) in roles.items()}
    for name, step in _STEPS.items():
        need = sum(count * getattr(task, name) for count, task in roles.values())
        if need <= getattr(room, name) + EPSILON:
            continue
        for section, (count, task) in roles.items():
            share = getattr(room, name) * _SHARES[section] / count
            amount = max(step, math.floor(share / step + 1e-9) * step)
            amount = round(amount, 1) if name == "cpu" else int(amount)
            sized[section] = dataclasses.replace(
                sized[section], **{name: min(amount, getattr(task, name))}
            )
    return dataclasses.replace(
        spec,
        workers=dataclasses.replace(spec.workers, resources=sized["workers"]),
        parameter_servers=dataclasses.replace(
            spec.parameter_servers, resources=sized["parameter_servers"]
        ),
        coordinator=dataclasses.replace(spec.coordinator, resources=sized["coordinator"]),
    )
