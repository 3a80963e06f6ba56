"""Quota what-if: the recorded history replayed through the simulator with changed quotas or
policy settings (`POST /api/v1/whatif/`, `trainhub whatif`, the web UI's what-if page).

Two replays of the same history (`history.py`) run through the live policy: one with the
cluster's settings as they are (the *replay*, which shows how closely the simulator
reproduces what happened) and one with the changes (the *what-if*). Each team's row puts
the actual history, the replay and the what-if side by side; `change` is what-if minus
replay, so the simulator's own error cancels out of it. Nothing is written.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from . import policy
from .history import History, read_history
from .simulate.engine import Simulator
from .snapshot import policy_config

# A replay runs inside a request, twice: windows with more jobs than this are refused (1,500
# jobs took 4 to 14 s per replay of the bursty trace on a 2-core machine).
MAX_JOBS = 1500
# The row that sums up the teams a team admin is not a member of.
OTHER_TEAMS = "(other teams)"


class WhatIfError(ValueError):
    """A what-if that cannot run; `field` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class QuotaChange:
    """A team's quota in the what-if, per resource (`cpu`, `memory_mb`, `gpu`); a resource
    left out keeps its value, a limit of None is unlimited."""

    nominal: Mapping[str, float] = field(default_factory=dict)
    borrowing_limit: Mapping[str, float | None] = field(default_factory=dict)
    lending_limit: Mapping[str, float | None] = field(default_factory=dict)


def _merged(current: policy.Resources, changes: Mapping[str, float | None]) -> policy.Resources:
    values = {name: getattr(current, name) for name in ("cpu", "memory_mb", "gpu")}
    for name, value in changes.items():
        values[name] = math.inf if value is None else float(value)
    return policy.Resources(**values)


@dataclass(frozen=True)
class Scenario:
    quotas: Mapping[str, QuotaChange] = field(default_factory=dict)
    policy: str | None = None  # None: the platform's policy
    preemption_grace_seconds: float | None = None
    aging_seconds_per_level: float | None = None


@dataclass(frozen=True)
class Outcome:
    """One team's jobs under one history: mean wait to first start, mean completion time
    of the jobs that finished, and resource-hours held. `never_started`: jobs the what-if
    never starts (their quota no longer holds them); they are left out of the means."""

    jobs: int
    wait_s: float
    jct_s: float
    cpu_hours: float
    gpu_hours: float
    never_started: int = 0

    def minus(self, other: Outcome) -> dict[str, float]:
        return {
            "wait_s": round(self.wait_s - other.wait_s, 1),
            "jct_s": round(self.jct_s - other.jct_s, 1),
            "cpu_hours": round(self.cpu_hours - other.cpu_hours, 2),
            "gpu_hours": round(self.gpu_hours - other.gpu_hours, 2),
        }


@dataclass(frozen=True)
class TeamComparison:
    team: str
    actual: Outcome
    replay: Outcome
    whatif: Outcome


@dataclass(frozen=True)
class WhatIf:
    since: datetime
    until: datetime
    policy: str
    jobs: int
    never_ran: int
    teams: list[TeamComparison]
    seconds: float  # how long the two replays took


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _actual(history: History) -> dict[str, Outcome]:
    waits: dict[str, list[float]] = defaultdict(list)
    jcts: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, float] = defaultdict(float)
    gpu: dict[str, float] = defaultdict(float)
    for r in history.recorded.values():
        waits[r.team].append(r.first_start - r.submitted)
        if r.finished is not None:
            jcts[r.team].append(r.finished - r.submitted)
        cpu[r.team] += r.held.cpu * r.run_s / 3600
        gpu[r.team] += r.held.gpu * r.run_s / 3600
    return {
        team: Outcome(len(waits[team]), _mean(waits[team]), _mean(jcts[team]), cpu[team], gpu[team])
        for team in waits
    }


def _simulated(
    history: History, cluster_teams: tuple[policy.Team, ...], s: Scenario
) -> dict[str, Outcome]:
    config = policy_config()
    if s.preemption_grace_seconds is not None:
        config = dataclasses.replace(config, preemption_grace_seconds=s.preemption_grace_seconds)
    if s.aging_seconds_per_level is not None:
        config = dataclasses.replace(config, aging_seconds_per_level=s.aging_seconds_per_level)
    sim = Simulator(
        dataclasses.replace(history.cluster, teams=cluster_teams),
        history.trace,
        policy=s.policy or settings.SCHEDULER_POLICY,
        config=config,
    )
    report = sim.run()
    waits: dict[str, list[float]] = defaultdict(list)
    jcts: dict[str, list[float]] = defaultdict(list)
    jobs: dict[str, int] = defaultdict(int)
    never: dict[str, int] = defaultdict(int)
    finished_in_fact = {j for j, r in history.recorded.items() if r.finished is not None}
    for job in history.trace:
        jobs[job.team] += 1
        start = sim.started.get(job.job_id)
        if start is None:
            never[job.team] += 1
            continue
        waits[job.team].append(start - job.submit_time_s)
        end = sim.ended.get(job.job_id)
        if job.job_id in finished_in_fact and end is not None:
            jcts[job.team].append(end - job.submit_time_s)
    out = {}
    for team, count in jobs.items():
        used = report.teams.get(team, {}).get("used_hours", {})
        out[team] = Outcome(
            count,
            _mean(waits[team]),
            _mean(jcts[team]),
            float(used.get("cpu", 0.0)),
            float(used.get("gpu", 0.0)),
            never[team],
        )
    return out


def _changed_teams(
    teams: Iterable[policy.Team], quotas: Mapping[str, QuotaChange]
) -> tuple[policy.Team, ...]:
    known = {t.name: t for t in teams}
    unknown = sorted(set(quotas) - set(known))
    if unknown:
        raise WhatIfError("quotas", f"no team {unknown[0]!r} has a quota on this platform")
    out = []
    for name, team in known.items():
        change = quotas.get(name)
        if change is not None:
            team = policy.Team(
                name,
                _merged(team.nominal, change.nominal),
                _merged(team.borrowing_limit, change.borrowing_limit),
                _merged(team.lending_limit, change.lending_limit),
            )
        out.append(team)
    return tuple(out)


def what_if(now: datetime, days: float, scenario: Scenario) -> WhatIf:
    """Replay the last `days` days as they were and with `scenario`; compare per team.

    Raises:
        WhatIfError: an unknown team or policy, or more than `MAX_JOBS` jobs to replay.
    """
    chosen = scenario.policy or settings.SCHEDULER_POLICY
    if chosen not in policy.POLICIES:
        raise WhatIfError("policy", f"choose one of {sorted(policy.POLICIES)}")
    history = read_history(now, days)
    if len(history.trace) > MAX_JOBS:
        raise WhatIfError(
            "days",
            f"the last {days:g} days hold {len(history.trace)} jobs that ran; one what-if "
            f"replays at most {MAX_JOBS}: ask for fewer days",
        )
    changed = _changed_teams(history.cluster.teams, scenario.quotas)
    began = time.perf_counter()
    replay = _simulated(history, history.cluster.teams, Scenario())
    # Nothing to change (a link naming only the days): the what-if is the replay itself.
    whatif = replay if scenario == Scenario() else _simulated(history, changed, scenario)
    seconds = time.perf_counter() - began
    actual = _actual(history)
    empty = Outcome(0, 0.0, 0.0, 0.0, 0.0)
    teams = [
        TeamComparison(
            team, actual.get(team, empty), replay.get(team, empty), whatif.get(team, empty)
        )
        for team in sorted(set(actual) | {t.name for t in changed})
    ]
    return WhatIf(history.since, now, chosen, len(history.trace), history.never_ran, teams, seconds)


def as_seen_by(result: WhatIf, visible: set[str] | None) -> list[TeamComparison]:
    """The rows of the teams in `visible` (None: all), the others that had jobs pooled
    into one row."""
    if visible is None:
        return result.teams
    others = [r for r in result.teams if r.team not in visible and r.actual.jobs]
    rows = [r for r in result.teams if r.team in visible]
    if others:
        rows.append(
            TeamComparison(
                OTHER_TEAMS,
                _pooled([r.actual for r in others]),
                _pooled([r.replay for r in others]),
                _pooled([r.whatif for r in others]),
            )
        )
    return rows


def _pooled(outcomes: list[Outcome]) -> Outcome:
    """Several teams as one: means weighted by the jobs started, summed hours."""
    weights = [o.jobs - o.never_started for o in outcomes]
    started = sum(weights)

    def mean(values: list[float]) -> float:
        return (
            sum(v * w for v, w in zip(values, weights, strict=True)) / started if started else 0.0
        )

    return Outcome(
        sum(o.jobs for o in outcomes),
        mean([o.wait_s for o in outcomes]),
        mean([o.jct_s for o in outcomes]),
        sum(o.cpu_hours for o in outcomes),
        sum(o.gpu_hours for o in outcomes),
        sum(o.never_started for o in outcomes),
    )
