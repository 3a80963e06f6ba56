"""Each job's progress as its tasks report it: the input of stall detection (`jobs.stalls`).

Progress is a task's metric step beyond its attempt's highest, or its coordinator's count
of completed closures rising (`ps_runtime.reporting`: the agent's `progress` messages,
which also carry the phases a task marks, such as an evaluation or a checkpoint). Per job,
`JobTelemetry.progress` is one small JSON document, changed under the row lock every
ingest takes anyway (`budgets.locked_usage`): one UPDATE per batch, none per point.

    {"at": "<time of the last progress>", "intervals": [seconds, …],
     "paused": <phase seconds since "at", of phases that ended>,
     "phase_since": "<time a phase opened>" | null,
     "phases": {"<task id>": [attempt, depth]},
     "marks": {"<task id>": [attempt, highest step, closures]}}

Times are the server's, when a batch arrives: one clock for every node. An interval is
the time between two progresses minus the phase time between them, kept only between
progresses of attempts already seen (the first of an attempt follows a restart's gap).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from ps_runtime.agent.protocol import PhaseState, ProgressItem
from trainhub.jobs.models import Task
from trainhub.jobs.stalls import WINDOW, ProgressView

from .budgets import locked_usage
from .models import JobTelemetry


def _time(text: Any) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) else None


@dataclass
class Progress:
    """`JobTelemetry.progress`, read (`load`) and written back (`dump`)."""

    at: datetime | None = None
    intervals: list[float] = field(default_factory=list)
    paused: float = 0.0
    phase_since: datetime | None = None
    phases: dict[str, list[int]] = field(default_factory=dict)
    marks: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def load(cls, data: dict[str, Any]) -> Progress:
        return cls(
            at=_time(data.get("at")),
            intervals=[float(v) for v in data.get("intervals", [])],
            paused=float(data.get("paused", 0.0)),
            phase_since=_time(data.get("phase_since")),
            phases={k: list(v) for k, v in data.get("phases", {}).items()},
            marks={k: list(v) for k, v in data.get("marks", {}).items()},
        )

    def dump(self) -> dict[str, Any]:
        return {
            "at": None if self.at is None else self.at.isoformat(),
            "intervals": [round(v, 3) for v in self.intervals],
            "paused": round(self.paused, 3),
            "phase_since": None if self.phase_since is None else self.phase_since.isoformat(),
            "phases": self.phases,
            "marks": self.marks,
        }

    def view(self) -> ProgressView:
        return ProgressView(self.at, tuple(self.intervals), self.paused, self.phase_since)

    def _mark(self, task_id: int, attempt: int, now: datetime) -> list[int] | None:
        """The task's mark for `attempt` (a new attempt starts afresh and closes the old
        one's phases); None for an attempt older than the one known (a late message)."""
        key = str(task_id)
        mark = self.marks.get(key)
        if mark is not None and mark[0] > attempt:
            return None
        if mark is None or mark[0] < attempt:
            mark = self.marks[key] = [attempt, -1, -1]
            if key in self.phases and self.phases[key][0] < attempt:
                self._close_phase(key, now)
        return mark

    def progressed(
        self,
        task_id: int,
        attempt: int,
        now: datetime,
        *,
        step: int | None = None,
        closures: int | None = None,
    ) -> bool:
        """Note a task's highest step or closure count; True if that is progress."""
        mark = self._mark(task_id, attempt, now)
        if mark is None:
            return False
        known = mark[1] >= 0 or mark[2] >= 0  # this attempt progressed before
        advanced = False
        if step is not None and step > mark[1]:
            mark[1], advanced = step, True
        if closures is not None and closures > mark[2]:
            mark[2], advanced = closures, True
        if not advanced:
            return False
        if known and self.at is not None:
            gap = (now - self.at).total_seconds() - self.view().phase_seconds(now)
            self.intervals = [*self.intervals, max(gap, 0.0)][-WINDOW:]
        self.at, self.paused = now, 0.0
        if self.phase_since is not None:
            self.phase_since = now  # the open phase counts from here on
        return True

    def phase(self, task_id: int, attempt: int, state: PhaseState, now: datetime) -> bool:
        """A task began or ended a phase (they nest); True if anything changed."""
        if self._mark(task_id, attempt, now) is None:
            return False
        key = str(task_id)
        if state == PhaseState.BEGIN:
            depth = self.phases.get(key, [attempt, 0])[1]
            self.phases[key] = [attempt, depth + 1]
            if self.phase_since is None:
                self.phase_since = now
            return True
        if key not in self.phases:
            return False
        self.phases[key][1] -= 1
        if self.phases[key][1] <= 0:
            self._close_phase(key, now)
        return True

    def _close_phase(self, key: str, now: datetime) -> None:
        del self.phases[key]
        if not self.phases and self.phase_since is not None:
            self.paused += max((now - self.phase_since).total_seconds(), 0.0)
            self.phase_since = None


def note_steps(usage: JobTelemetry, task: Task, steps: Iterable[int], now: datetime) -> bool:
    """A batch of a task's metric points (their steps) on the job's locked row; True
    when its progress changed (the caller saves `progress` with the batch's counts)."""
    highest = max(steps, default=None)
    if highest is None:
        return False
    progress = Progress.load(usage.progress)
    if not progress.progressed(task.pk, task.attempt, now, step=highest):
        return False
    usage.progress = progress.dump()
    return True


def apply_items(
    progress: Progress, task_id: int, attempt: int, items: Iterable[ProgressItem], now: datetime
) -> bool:
    """A batch of a task's progress items as of `now`: its phases in order, then its
    highest closure count as one progress (the same as in order, all being at `now`).
    True if anything changed."""
    items = list(items)
    closures = max((i.closures for i in items if i.closures is not None), default=None)
    changed = False
    for item in items:
        if item.state is not None:
            changed |= progress.phase(task_id, attempt, item.state, now)
    if closures is not None:
        changed |= progress.progressed(task_id, attempt, now, closures=closures)
    return changed


def record_progress(*, task: Task, items: Iterable[ProgressItem], now: datetime) -> bool:
    """`apply_items` on the job's row: one UPDATE when anything changed. True if it did."""
    with transaction.atomic():
        usage = locked_usage(task.job_id)
        progress = Progress.load(usage.progress)
        changed = apply_items(progress, task.pk, task.attempt, items, now)
        if changed:
            usage.progress = progress.dump()
            usage.save(update_fields=["progress"])
    return changed
