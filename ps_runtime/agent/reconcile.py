"""Level-triggered reconciliation: what to start and stop so the node matches its desired tasks."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from ps_runtime.agent.protocol import DesiredTask, TaskKey


@dataclass(frozen=True)
class Plan:
    """Stops happen before starts; `forget` are finished attempts no longer desired."""

    starts: tuple[DesiredTask, ...] = ()
    stops: tuple[TaskKey, ...] = ()
    forget: tuple[TaskKey, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.starts or self.stops or self.forget)


def reconcile(
    desired: Iterable[DesiredTask],
    running: Collection[TaskKey],
    finished: Collection[TaskKey] = (),
) -> Plan:
    """Compare desired tasks with local processes.

    Args:
        desired: the control plane's complete list for this node.
        running: keys of local processes that are alive (including ones being stopped).
        finished: attempts that already exited on their own; they are not started again
            while still desired (a restart is a new attempt from the control plane).

    Returns:
        A plan: stop every running attempt that is not desired (so a new attempt of an id
        stops the old one), start every desired attempt that is neither running nor
        finished. If the list names several attempts of one id, only the highest counts.
    """
    latest: dict[int, DesiredTask] = {}
    for task in desired:
        current = latest.get(task.id)
        if current is None or task.attempt > current.attempt:
            latest[task.id] = task
    wanted = {task.key for task in latest.values()}
    running_set = set(running)
    starts = tuple(
        task
        for task in sorted(latest.values(), key=lambda t: t.id)
        if task.key not in running_set and task.key not in finished
    )
    stops = tuple(sorted(key for key in running_set if key not in wanted))
    forget = tuple(sorted(key for key in finished if key not in wanted))
    return Plan(starts=starts, stops=stops, forget=forget)
