"""Issue 30, done-means 2: stalls are detected within 2 x the job's p95 step interval +
30 s, and 20 healthy runs with long evaluation phases and checkpoints never stall.

The runs are simulated on one clock at the level of what reaches the server: each
training step completes a closure, the coordinator tells its count at most every
`PROGRESS_EVERY_SECONDS` (as `ps_runtime.reporting` does) and reports a metric every 30 s
or so, evaluations and checkpoints are phases, and the agent delivers what was written at
its next 0.5 s drain. Everything after that is the real code, with the default `stall:`
section and the check every 10 s: the recording (`Progress`, `apply_items`) and the
detector (`judge`) in memory for the twenty 20-minute runs, and for a few the whole
database path (`ingest_metrics`, `record_progress`, the beat's `check_stalls`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.stalls import WINDOW, StallSpec, judge, p95
from trainhub.nodes.models import Node
from trainhub.telemetry.models import JobTelemetry
from trainhub.telemetry.progress import Progress, apply_items, record_progress
from trainhub.telemetry.services import ingest_metrics
from trainhub.telemetry.stallcheck import INTERVAL_SECONDS, check_stalls
from trainhub.tenancy.choices import Role

from ps_runtime.agent.protocol import PhaseState, ProgressItem
from ps_runtime.reporting import PROGRESS_EVERY_SECONDS

from ..event_capture import HANDLER
from ..factories import make_job, make_node, make_team, make_user, running_job

DRAIN_SECONDS = 0.5  # the agent sends its outbox every 0.5 s
SIMULATED_SECONDS = 1200.0
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _events_to_the_recorder_only(settings: Any) -> None:
    settings.EVENT_HANDLERS = [HANDLER]


@dataclass
class Sent:
    """What the server receives, when: a closure count, a metric step, or a phase."""

    at: float
    closures: int | None = None
    step: int | None = None
    phase: PhaseState | None = None


@dataclass
class Run:
    """One simulated job: what its coordinator sends, and when its last step was."""

    sent: list[Sent] = field(default_factory=list)
    last_step_at: float = 0.0
    steps: list[float] = field(default_factory=list)  # each step's duration


def _delivered(t: float) -> float:
    return math.ceil(t / DRAIN_SECONDS) * DRAIN_SECONDS + 0.05


def simulate(
    rng: random.Random, *, step_s: float, phases: list[tuple[float, float]], hang_at: float = 1e9
) -> Run:
    """A coordinator training with steps of about `step_s` (log-normal, a slow one now
    and then), through `phases` ((start, seconds): evaluations and checkpoints, in which no
    step completes), until `hang_at`, when it stops for good."""
    run, t, closures, told = Run(), 0.0, 0, -PROGRESS_EVERY_SECONDS
    todo = sorted(phases)
    while t < SIMULATED_SECONDS:
        if todo and t >= todo[0][0]:
            _, seconds = todo.pop(0)
            run.sent.append(Sent(_delivered(t), phase=PhaseState.BEGIN))
            t += seconds
            run.sent.append(Sent(_delivered(t), phase=PhaseState.END))
            continue
        duration = min(step_s * rng.lognormvariate(0, 0.4), 4 * step_s)
        if t + duration >= hang_at:
            break
        t += duration
        run.steps.append(duration)
        closures += 1
        run.last_step_at = t
        if t - told >= PROGRESS_EVERY_SECONDS:  # the runtime's throttle
            told = t
            run.sent.append(Sent(_delivered(t), closures=closures))
        if closures % max(25, int(30 / step_s)) == 0:  # a metric every 30 s or so
            run.sent.append(Sent(_delivered(t), step=closures))
    run.sent.sort(key=lambda s: s.at)
    return run


class Recorder:
    """Where a run's messages go: the database (`Database`) or the same recording and
    judging code in memory (`InMemory`, for many long runs in little time)."""

    def deliver(self, index: int, sent: Sent, now: datetime) -> None:
        raise NotImplementedError

    def check(self, now: datetime) -> list[int]:
        """The runs found stalled at `now`."""
        raise NotImplementedError


class InMemory(Recorder):
    """`Progress` and `judge` as ingest and the stall check apply them, without rows."""

    def __init__(self, count: int) -> None:
        self.progress = [Progress() for _ in range(count)]
        self.spec = StallSpec()  # the defaults: k 2, floor 20 s

    def deliver(self, index: int, sent: Sent, now: datetime) -> None:
        progress = self.progress[index]
        if sent.step is not None:
            progress.progressed(1, 1, now, step=sent.step)
        else:
            apply_items(progress, 1, 1, [_item(sent, now)], now)

    def check(self, now: datetime) -> list[int]:
        verdicts = [judge(self.spec, p.view(), now) for p in self.progress]
        return [i for i, v in enumerate(verdicts) if v is not None and v.stalled]


class Database(Recorder):
    """The real thing: `ingest_metrics`, `record_progress`, the beat's `check_stalls`."""

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = jobs
        self.coordinators = [job.tasks.get(role="coordinator") for job in jobs]

    def deliver(self, index: int, sent: Sent, now: datetime) -> None:
        task = self.coordinators[index]
        if sent.step is not None:
            points = [{"step": sent.step, "values": {"loss": 1.0}}]
            ingest_metrics(task=task, points=points, now=now)
        else:
            record_progress(task=task, items=[_item(sent, now)], now=now)

    def check(self, now: datetime) -> list[int]:
        check_stalls(now=now)
        stalled = set(
            Job.objects.filter(
                pk__in=[j.pk for j in self.jobs], stalled_at__isnull=False
            ).values_list("pk", flat=True)
        )
        return [i for i, job in enumerate(self.jobs) if job.pk in stalled]


def _item(sent: Sent, now: datetime) -> ProgressItem:
    if sent.phase is not None:
        return ProgressItem(now, phase="evaluation", state=sent.phase)
    return ProgressItem(now, closures=sent.closures)


def replay(runs: list[Run], to: Recorder, t0: datetime, until: float) -> dict[int, float]:
    """Deliver every run's messages in time order with the stall check every 10 s
    between, up to `until` seconds; when each run found stalled was found so."""
    sent = sorted(
        ((s.at, i, s) for i, run in enumerate(runs) for s in run.sent), key=lambda x: x[:2]
    )
    found: dict[int, float] = {}
    check, position = INTERVAL_SECONDS, 0
    while check <= until:
        while position < len(sent) and sent[position][0] <= check:
            at, index, item = sent[position]
            to.deliver(index, item, t0 + timedelta(seconds=at))
            position += 1
        for index in to.check(t0 + timedelta(seconds=check)):
            found.setdefault(index, check)
        check += INTERVAL_SECONDS
    return found


@pytest.fixture
def owner(db: Any) -> tuple[Any, Node]:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=1024, memory_mb=2**24)
    node, _ = make_node(cpus=512, memory_mb=2**23)
    return alice, node


def _jobs(owner: tuple[Any, Node], count: int) -> list[Job]:
    user, node = owner
    return [running_job(make_job(user, name=f"run-{i}"), node) for i in range(count)]


def _phases(rng: random.Random) -> list[tuple[float, float]]:
    """Two long evaluations (1 to 5 minutes, 2 minutes) and three checkpoints (20 s to 2
    minutes)."""
    evaluations = [(rng.uniform(100, 250), rng.uniform(60, 300)), (rng.uniform(700, 800), 120)]
    checkpoints = [(start, rng.uniform(20, 120)) for start in (rng.uniform(40, 90), 600, 950)]
    return evaluations + checkpoints


SPEEDS = [0.05, 0.3, 1.0, 2.5, 5.0]  # seconds per training step; four runs of each


def _healthy(seed: int) -> list[Run]:
    rng = random.Random(seed)
    return [simulate(rng, step_s=SPEEDS[i % 5], phases=_phases(rng)) for i in range(20)]


def test_twenty_healthy_runs_with_long_evaluations_and_checkpoints_never_stall() -> None:
    runs = _healthy(30)
    assert all(sum(1 for s in r.sent if s.phase == PhaseState.BEGIN) == 5 for r in runs)
    memory = InMemory(len(runs))
    assert replay(runs, memory, T0, until=SIMULATED_SECONDS) == {}
    # Every run was judged, not merely too young to be: each has its window of intervals.
    assert all(len(p.intervals) == WINDOW for p in memory.progress)


def test_healthy_runs_through_the_database_never_stall_either(owner: tuple[Any, Node]) -> None:
    fast, slow = _healthy(30)[0], _healthy(30)[4]  # 0.05 s and 5 s a step
    jobs = _jobs(owner, 2)
    t0 = timezone.now() + timedelta(seconds=1)  # after they started running
    assert replay([fast, slow], Database(jobs), t0, until=SIMULATED_SECONDS) == {}
    assert not JobEvent.objects.filter(job__in=jobs, kind="stall").exists()


@pytest.mark.parametrize("step_s", [0.05, 1.0, 5.0, 12.0])
def test_a_stall_is_detected_within_2_p95_plus_30_s(step_s: float) -> None:
    rng = random.Random(int(step_s * 100))
    runs = [
        simulate(rng, step_s=step_s, phases=[(30, 40), (60, 200)], hang_at=hang)
        for hang in (400.0, 500.0, 613.0, 777.0)
    ]
    memory = InMemory(len(runs))
    found = replay(runs, memory, T0, until=SIMULATED_SECONDS)
    assert set(found) == {0, 1, 2, 3}
    for index, run in enumerate(runs):
        waited = found[index] - run.last_step_at
        # The job's p95 step interval as the platform measures it (its limit's base) …
        measured = p95(memory.progress[index].intervals)
        assert 20 < waited <= 2 * measured + 30, (step_s, index, waited, measured)
        # … which is at least the runtime's progress cadence.
        assert waited <= 2 * max(p95(run.steps), PROGRESS_EVERY_SECONDS) + 30


def test_a_stall_through_the_database_is_marked_in_time(owner: tuple[Any, Node]) -> None:
    run = simulate(random.Random(1), step_s=1.0, phases=[(30, 40), (60, 100)], hang_at=250)
    [job] = _jobs(owner, 1)
    t0 = timezone.now() + timedelta(seconds=1)
    found = replay([run], Database([job]), t0, until=400)
    measured = p95(Progress.load(JobTelemetry.objects.get(pk=job.pk).progress).intervals)
    assert 20 < found[0] - run.last_step_at <= 2 * measured + 30
    stall = JobEvent.objects.get(job=job, kind="stall")
    assert stall.time == t0 + timedelta(seconds=found[0])
