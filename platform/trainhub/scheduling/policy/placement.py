"""Free capacity per node, indexed for best fit, and gang placement over it.

Nodes are grouped by (owner, has GPUs); each group keeps its nodes in a sorted list keyed
by free capacity (GPU nodes by free GPUs then CPUs, CPU nodes by free CPUs then memory),
so finding the tightest node that fits is a bisection plus a short scan, and taking or
giving back capacity moves one key. A gang shape that failed is remembered until some
capacity is given back, so a queue of identical jobs costs one search.

GPUs are also counted per model on each node: a task bound to a model (`ModelResources`)
fits only where enough GPUs of that model are free, and takes them from that model's count.
A node whose agent cannot isolate tasks (`Node.isolated` false: `isolation: "none"`)
hosts one team at a time: the teams holding capacity there are counted, and `find` skips
it for any other team.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Collection, Iterable, Sequence

from .model import EPSILON, PS, READY, Node, Resources, gpu_model_of

# (role, index, resources) of one task to place; (role, index, node position, resources) placed.
TaskSpec = tuple[str, int, Resources]
Placed = tuple[str, int, int, Resources]
GroupKey = tuple[str | None, bool]


class Capacity:
    """Free capacity of every node; only READY nodes can receive tasks."""

    def __init__(self, nodes: Sequence[Node], cpu_reserved_per_free_gpu: float) -> None:
        self.node_ids = [n.id for n in nodes]
        self.position = {n.id: i for i, n in enumerate(nodes)}
        self.cpu = [n.capacity.cpu for n in nodes]
        self.mem = [n.capacity.memory_mb for n in nodes]
        self.gpu = [n.capacity.gpu for n in nodes]
        self.has_gpus = [n.has_gpus for n in nodes]
        self.ready = [n.state == READY for n in nodes]
        self.owner = [n.owner for n in nodes]
        self.isolated = [n.isolated for n in nodes]
        # Teams holding capacity on each node without isolation (tasks, reservations).
        self.teams: list[Counter[str]] = [Counter() for _ in nodes]
        self.reserve_per_gpu = cpu_reserved_per_free_gpu
        # Free GPUs per model, per node position.
        self.model_free: list[dict[str, float]] = [
            {m: float(k) for m, k in n.gpu_models.items()} for n in nodes
        ]
        self.max_model: dict[str, float] = {}
        for n in nodes:
            if n.state == READY:
                for m, k in n.gpu_models.items():
                    self.max_model[m] = max(self.max_model.get(m, 0.0), float(k))
        self.groups: dict[GroupKey, list[tuple[float, float, int]]] = {}
        self.max_capacity = Resources(
            max((n.capacity.cpu for n in nodes if n.state == READY), default=0.0),
            max((n.capacity.memory_mb for n in nodes if n.state == READY), default=0.0),
            max((n.capacity.gpu for n in nodes if n.state == READY), default=0.0),
        )
        # Bumped whenever capacity is given back; failure memos older than it are stale.
        self.release_version = 0
        self._failed: dict[tuple[object, ...], tuple[int, str]] = {}
        self._written: list[tuple[object, ...]] = []  # `_failed` keys in the order written
        self._order_cache: dict[tuple[str, bool], list[list[tuple[float, float, int]]]] = {}
        self.indexed = False

    # -- building ---------------------------------------------------------------------------

    def hold(self, node_id: int, res: Resources, team: str | None = None) -> None:
        """Count resources as used before the index is built (tasks, reservations)."""
        pos = self.position.get(node_id)
        if pos is None:
            return
        self.occupy(pos, team)
        self.cpu[pos] -= res.cpu
        self.mem[pos] -= res.memory_mb
        self.gpu[pos] -= res.gpu
        self.hold_model(pos, res)

    def hold_model(self, pos: int, res: Resources) -> None:
        """Count a model-bound task's GPUs against its model (the GPU total aside)."""
        model = gpu_model_of(res)
        if model is not None:
            free = self.model_free[pos]
            free[model] = free.get(model, 0.0) - res.gpu

    def build_index(self) -> None:
        for pos in range(len(self.node_ids)):
            if self.ready[pos]:
                self.groups.setdefault((self.owner[pos], self.has_gpus[pos]), []).append(
                    self._key(pos)
                )
        for keys in self.groups.values():
            keys.sort()
        self.indexed = True

    def _key(self, pos: int) -> tuple[float, float, int]:
        if self.has_gpus[pos]:
            return (self.gpu[pos], self.cpu[pos], pos)
        return (self.cpu[pos], self.mem[pos], pos)

    def occupy(self, pos: int, team: str | None, count: int = 1) -> None:
        """Count (or with a negative count, uncount) a team's hold on a node without
        isolation; nodes with isolation need no count."""
        if team is None or self.isolated[pos]:
            return
        held = self.teams[pos]
        held[team] += count
        if held[team] <= 0:
            del held[team]

    def allows(self, pos: int, team: str) -> bool:
        """Whether `team` may get capacity on the node: isolated, or no other team there."""
        if self.isolated[pos]:
            return True
        held = self.teams[pos]
        return not held or (len(held) == 1 and team in held)

    # -- queries ----------------------------------------------------------------------------

    def free_total(self) -> Resources:
        cpu = mem = gpu = 0.0
        for pos, ready in enumerate(self.ready):
            if ready:
                cpu += max(0.0, self.cpu[pos])
                mem += max(0.0, self.mem[pos])
                gpu += max(0.0, self.gpu[pos])
        return Resources(cpu, mem, gpu)

    def _ordered_groups(self, team: str, gpu_task: bool) -> list[list[tuple[float, float, int]]]:
        """Groups to search, best first: own nodes, unowned nodes, other teams' nodes; CPU
        tasks search CPU nodes before GPU nodes."""
        cached = self._order_cache.get((team, gpu_task))
        if cached is not None:
            return cached
        kinds = [True] if gpu_task else [False, True]
        order: list[list[tuple[float, float, int]]] = []
        for has_gpus in kinds:
            owners = sorted(
                (o for (o, g) in self.groups if g == has_gpus),
                key=lambda o: (o != team, o is not None, o or ""),
            )
            order += [self.groups[(o, has_gpus)] for o in owners]
        self._order_cache[(team, gpu_task)] = order
        return order

    def fits(self, pos: int, res: Resources) -> bool:
        if not (
            self.cpu[pos] + EPSILON >= res.cpu
            and self.mem[pos] + EPSILON >= res.memory_mb
            and self.gpu[pos] + EPSILON >= res.gpu
        ):
            return False
        model = gpu_model_of(res)
        if model is not None and self.model_free[pos].get(model, 0.0) + EPSILON < res.gpu:
            return False
        if res.gpu <= 0 and self.has_gpus[pos]:
            # CPU-only work leaves enough CPU beside the node's free GPUs.
            left = self.cpu[pos] - res.cpu
            return left + EPSILON >= self.reserve_per_gpu * max(0.0, self.gpu[pos])
        return True

    def find(self, team: str, res: Resources, exclude: set[int] | None = None) -> int | None:
        """Position of the tightest READY node that fits `res` (best fit), or None."""
        gpu_task = res.gpu > 0
        # The plain capacity test and the other-team test inline first: most nodes a scan
        # meets fail one of them.
        cpu, mem, isolated, teams = self.cpu, self.mem, self.isolated, self.teams
        need_cpu, need_mem = res.cpu - EPSILON, res.memory_mb - EPSILON
        for keys in self._ordered_groups(team, gpu_task):
            if not keys:
                continue
            if self.has_gpus[keys[0][2]]:
                start = bisect_left(keys, (res.gpu - EPSILON, -float("inf"), -1))
            else:
                start = bisect_left(keys, (need_cpu, -float("inf"), -1))
            for i in range(start, len(keys)):
                pos = keys[i][2]
                if cpu[pos] < need_cpu or mem[pos] < need_mem:
                    continue
                if (
                    not isolated[pos]
                    and (held := teams[pos])
                    and (len(held) > 1 or team not in held)
                ):
                    continue  # another team's tasks are there (`allows`)
                if exclude is not None and pos in exclude:
                    continue
                if self.fits(pos, res):
                    return pos
        return None

    def could_take(self, pos: int, team: str, shapes: Iterable[Resources]) -> bool:
        """Whether the node could take a task of one of `shapes` for `team` now. When no node
        that changed since a failed placement can, placing again fails too: best fit never
        picks them."""
        return self.allows(pos, team) and any(self.fits(pos, res) for res in shapes)

    def room_after(self, freed: Iterable[tuple[int, Resources]], shapes: list[Resources]) -> bool:
        """Whether a node would have the CPU, memory and GPUs for a task of one of `shapes`
        once `freed` (position, resources) is given back (`could_take` without the team and
        GPU-model rules, and without changing anything)."""
        added: dict[int, Resources] = {}
        for pos, res in freed:
            added[pos] = added.get(pos, Resources()) + res
        return any(
            self.cpu[pos] + a.cpu + EPSILON >= r.cpu
            and self.mem[pos] + a.memory_mb + EPSILON >= r.memory_mb
            and self.gpu[pos] + a.gpu + EPSILON >= r.gpu
            for pos, a in added.items()
            for r in shapes
        )

    # -- changes ----------------------------------------------------------------------------

    def _move(self, pos: int, res: Resources, sign: int) -> None:
        """Add (sign=+1) or remove (sign=-1) `res` from the node's free capacity."""
        indexed = self.indexed and self.ready[pos]
        if indexed:
            keys = self.groups[(self.owner[pos], self.has_gpus[pos])]
            old = self._key(pos)
            del keys[bisect_left(keys, old)]
        self.cpu[pos] += sign * res.cpu
        self.mem[pos] += sign * res.memory_mb
        self.gpu[pos] += sign * res.gpu
        model = gpu_model_of(res)
        if model is not None:
            free = self.model_free[pos]
            free[model] = free.get(model, 0.0) + sign * res.gpu
        if indexed:
            insort(keys, self._key(pos))

    def take(self, pos: int, res: Resources, team: str | None = None) -> None:
        self._move(pos, res, -1)
        self.occupy(pos, team)

    def give_back(self, pos: int, res: Resources, team: str | None = None) -> None:
        self._move(pos, res, +1)
        self.occupy(pos, team, -1)
        self.release_version += 1

    def mark(self) -> tuple[int, int]:
        """A point to come back to with `restored` after tentative changes."""
        return (self.release_version, len(self._written))

    def restored(self, mark: tuple[int, int]) -> None:
        """Capacity is again exactly as it was at `mark` (a tentative change undone):
        failures remembered since are forgotten, and those remembered then hold again."""
        version, written = mark
        for shape in self._written[written:]:
            memo = self._failed.get(shape)
            if memo is not None and memo[0] > version:
                del self._failed[shape]
        del self._written[written:]
        self.release_version = version

    def _remember(self, shape: tuple[object, ...], reason: str) -> None:
        self._failed[shape] = (self.release_version, reason)
        self._written.append(shape)

    # -- gangs ------------------------------------------------------------------------------

    def place_gang(
        self, team: str, tasks: Iterable[TaskSpec], avoid: Collection[int] = ()
    ) -> list[Placed] | None:
        """Place every task or none (capacity untouched on failure). PS shards go to
        distinct nodes when they can; the largest tasks are placed first. Nodes in `avoid`
        (ids: where the job's tasks just failed at start) get a task only when no other
        node fits it."""
        ordered = sorted(tasks, key=lambda t: (-t[2].gpu, -t[2].cpu, -t[2].memory_mb, t[0], t[1]))
        avoided = {self.position[n] for n in avoid if n in self.position}
        shape = (team, tuple((t[0] == PS, t[2]) for t in ordered), tuple(sorted(avoided)))
        memo = self._failed.get(shape)
        if memo is not None and memo[0] == self.release_version:
            return None
        placed: list[Placed] = []
        ps_nodes: set[int] = set()
        for role, index, res in ordered:
            pos: int | None = None
            if role == PS:
                # Distinct nodes and not avoided, then distinct, then anywhere.
                if avoided:
                    pos = self.find(team, res, exclude=ps_nodes | avoided)
                if pos is None:
                    pos = self.find(team, res, exclude=ps_nodes)
                if pos is None and ps_nodes:
                    pos = self.find(team, res)
            else:
                if avoided:
                    pos = self.find(team, res, exclude=avoided)
                if pos is None:
                    pos = self.find(team, res)
            if pos is None:
                for _, _, p, r in placed:
                    self._move(p, r, +1)
                    self.occupy(p, team, -1)
                self._remember(shape, "")
                return None
            self.take(pos, res, team)
            if role == PS:
                ps_nodes.add(pos)
            placed.append((role, index, pos, res))
        return placed

    def unplace(self, placed: Iterable[Placed], team: str | None = None) -> None:
        for _, _, pos, res in placed:
            self.give_back(pos, res, team)

    def why_not(self, tasks: Sequence[TaskSpec], team: str | None = None) -> str:
        """A human-readable reason why the gang does not fit now."""
        shape = ("why", team, tuple(t[2] for t in tasks))
        memo = self._failed.get(shape)
        if memo is not None and memo[0] == self.release_version:
            return memo[1]
        reason = self._why_not(tasks, team)
        self._remember(shape, reason)
        return reason

    def _why_not(self, tasks: Sequence[TaskSpec], team: str | None = None) -> str:
        if not any(self.ready):
            return "no nodes are available"
        if team is not None:
            biggest_task = max(tasks, key=lambda t: (t[2].gpu, t[2].cpu, t[2].memory_mb))[2]
            fitting = [
                p for p in range(len(self.ready)) if self.ready[p] and self.fits(p, biggest_task)
            ]
            if fitting and not any(self.allows(p, team) for p in fitting):
                others = sorted({t for p in fitting for t in self.teams[p] if t != team})
                return (
                    "the nodes with room run tasks of another team ("
                    + ", ".join(others)
                    + ") and do not isolate tasks (isolation: none): one team at a time"
                )
        need = Resources()
        for _, _, res in tasks:
            need = need + res
        biggest = max(tasks, key=lambda t: (t[2].gpu, t[2].cpu, t[2].memory_mb))[2]
        cap = self.max_capacity
        if biggest.gpu > cap.gpu + EPSILON:
            return f"no node has {biggest.gpu:g} GPUs"
        for _, _, res in tasks:
            model = gpu_model_of(res)
            if model is None:
                continue
            if res.gpu > self.max_model.get(model, 0.0) + EPSILON:
                return f"no node has {res.gpu:g} {model} GPUs"
            ready = [p for p in range(len(self.ready)) if self.ready[p]]
            if not any(self.model_free[p].get(model, 0.0) + EPSILON >= res.gpu for p in ready):
                most = max([0.0, *(self.model_free[p].get(model, 0.0) for p in ready)])
                return (
                    f"no node has {res.gpu:g} free {model} GPUs (at most {most:g} free on any node)"
                )
            if not any(self.fits(p, res) for p in ready):
                return (
                    f"no node has {res.gpu:g} free {model} GPUs with {res.cpu:g} CPUs and "
                    f"{res.memory_mb:g} MiB beside them"
                )
        if biggest.gpu > 0:
            gpu_nodes = [p for p in range(len(self.ready)) if self.ready[p] and self.has_gpus[p]]
            if not any(self.gpu[p] + EPSILON >= biggest.gpu for p in gpu_nodes):
                most = max(0.0, max((self.gpu[p] for p in gpu_nodes), default=0.0))
                return f"no node has {biggest.gpu:g} free GPUs (at most {most:g} free on any node)"
            if not any(self.fits(p, biggest) for p in gpu_nodes):
                return (
                    f"no node has {biggest.gpu:g} free GPUs with {biggest.cpu:g} CPUs and "
                    f"{biggest.memory_mb:g} MiB beside them"
                )
        ready = [p for p in range(len(self.ready)) if self.ready[p]]
        for _, _, res in tasks:
            if res.gpu > 0:
                continue
            if not any(self.fits(p, res) for p in ready):
                if not any(self.cpu[p] + EPSILON >= res.cpu for p in ready):
                    most = max(0.0, max(self.cpu[p] for p in ready))
                    return f"no node has {res.cpu:g} free CPUs (at most {most:g} free on any node)"
                if not any(self.mem[p] + EPSILON >= res.memory_mb for p in ready):
                    most = max(0.0, max(self.mem[p] for p in ready))
                    return (
                        f"no node has {res.memory_mb:g} MiB of free memory (at most {most:g} "
                        "MiB free on any node)"
                    )
                return f"no node has {res.cpu:g} free CPUs and {res.memory_mb:g} MiB free"
        free = self.free_total()  # reasons say 0 free, not below: a node can shrink under tasks
        for name, needed, have in (
            ("gpu", need.gpu, max(0.0, free.gpu)),
            ("cpu", need.cpu, max(0.0, free.cpu)),
            ("memory_mb", need.memory_mb, max(0.0, free.memory_mb)),
        ):
            if needed > have + EPSILON:
                return f"not enough free {name} in the cluster: needs {needed:g}, {have:g} free"
        most = max(0.0, max((self.cpu[p] for p in ready), default=0.0))
        return (
            f"free resources are fragmented: no placement fits all {len(tasks)} tasks together "
            f"(they need {need.cpu:g} CPUs in all, {max(0.0, free.cpu):g} are free, at most "
            f"{most:g} on one node)"
        )
