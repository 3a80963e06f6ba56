"""What a simulation measures, and its report (text or one JSON object)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainhub.scheduling.policy import Resources

from .fairness import dominant_share, entitlements, jain, limit_share
from .inputs import Cluster

if TYPE_CHECKING:
    from .engine import SimJob

NAMES = ("cpu", "memory_mb", "gpu")
TIMELINE_BUCKET_S = 3600.0
TIMELINE_POINTS = 48


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@dataclass
class _TeamStats:
    quota_share: float
    nominal: tuple[float, float, float]
    limit: float = 1.0  # quota plus borrowing limit, as a share of the cluster
    active_s: float = 0.0
    share_s: float = 0.0  # ∫ dominant share while active
    entitled_s: float = 0.0  # ∫ entitlement while active (fairness.py)
    waiting: int = 0  # jobs submitted, not finished
    jobs: int = 0
    jct: list[float] = field(default_factory=list)
    borrowed: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    used: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # ∫ held
    buckets: dict[int, list[float]] = field(default_factory=dict)  # bucket -> [∫share, ∫t]


class Recorder:
    def __init__(self, cluster: Cluster) -> None:
        cap = cluster.capacity
        self.capacity = cap.as_tuple()
        self.teams: dict[str, _TeamStats] = {}
        for t in cluster.teams:
            nominal = t.nominal.as_tuple()
            share = max(
                (nominal[r] / self.capacity[r] for r in range(3) if self.capacity[r] > 0),
                default=0.0,
            )
            limit = limit_share(nominal, t.borrowing_limit.as_tuple(), self.capacity)
            self.teams[t.name] = _TeamStats(share, nominal, limit)
        self.used_integral = [0.0, 0.0, 0.0]
        self.first_submit: float | None = None
        self.last_end = 0.0
        self.jcts: list[float] = []
        self.waits: list[float] = []
        self.preemptions = 0
        self.resizes = 0
        self.lost_work_s = 0.0

    def _team(self, name: str) -> _TeamStats:
        if name not in self.teams:
            self.teams[name] = _TeamStats(0.0, (0.0, 0.0, 0.0))
        return self.teams[name]

    def submitted(self, sj: SimJob) -> None:
        t = sj.trace
        if self.first_submit is None:
            self.first_submit = t.submit_time_s
        stats = self._team(t.team)
        stats.waiting += 1
        stats.jobs += 1

    def first_start(self, sj: SimJob, now: float) -> None:
        self.waits.append(now - sj.trace.submit_time_s)

    def finished(self, sj: SimJob) -> None:
        assert sj.end is not None
        jct = sj.end - sj.trace.submit_time_s
        self.jcts.append(jct)
        stats = self._team(sj.trace.team)
        stats.jct.append(jct)
        stats.waiting -= 1
        self.last_end = max(self.last_end, sj.end)

    def preempted(self, sj: SimJob, lost_s: float) -> None:
        self.preemptions += 1
        self.lost_work_s += lost_s

    def resized(self) -> None:
        """One job resized in one cycle (however many workers it gained or lost)."""
        self.resizes += 1

    def advance(
        self,
        per_team: Mapping[str, list[float]],
        wanted: Mapping[str, list[float]],
        t0: float,
        t1: float,
    ) -> None:
        """Account [t0, t1) with `per_team` resources (cpu, memory_mb, gpu) held and
        `wanted` (held plus the minimum of what waits) asked for."""
        dt = t1 - t0
        for used in per_team.values():
            for r in range(3):
                self.used_integral[r] += used[r] * dt
        active = [name for name, stats in self.teams.items() if stats.waiting > 0]
        entitled = entitlements(
            {name: self.teams[name].quota_share for name in active},
            {
                name: min(
                    self.teams[name].limit,
                    dominant_share(wanted.get(name, (0.0, 0.0, 0.0)), self.capacity),
                )
                for name in active
            },
        )
        for name in active:
            stats = self.teams[name]
            used = per_team.get(name, [0.0, 0.0, 0.0])
            share = dominant_share(used, self.capacity)
            stats.active_s += dt
            stats.share_s += share * dt
            stats.entitled_s += entitled[name] * dt
            for r in range(3):
                stats.borrowed[r] += max(0.0, used[r] - stats.nominal[r]) * dt
                stats.used[r] += used[r] * dt
            # Split [t0, t1) over hour buckets for the share-over-time timeline.
            t = t0
            while t < t1:
                b = int(t // TIMELINE_BUCKET_S)
                end = min(t1, (b + 1) * TIMELINE_BUCKET_S)
                acc = stats.buckets.setdefault(b, [0.0, 0.0])
                acc[0] += share * (end - t)
                acc[1] += end - t
                t = end

    def report(self, policy: str) -> Report:
        start = self.first_submit or 0.0
        makespan = max(0.0, self.last_end - start)
        util = {
            NAMES[r]: (
                self.used_integral[r] / (self.capacity[r] * makespan)
                if self.capacity[r] > 0 and makespan > 0
                else 0.0
            )
            for r in range(3)
        }
        teams: dict[str, dict[str, Any]] = {}
        ratios, vs_entitled = [], []
        for name in sorted(self.teams):
            s = self.teams[name]
            avg_share = s.share_s / s.active_s if s.active_s > 0 else 0.0
            ratio = avg_share / s.quota_share if s.quota_share > 0 else None
            if ratio is not None and s.active_s > 0:
                ratios.append(ratio)
            entitled = s.entitled_s / s.active_s if s.active_s > 0 else 0.0
            versus = s.share_s / s.entitled_s if s.entitled_s > 0 else None
            if versus is not None:
                vs_entitled.append(versus)
            teams[name] = {
                "jobs": s.jobs,
                "quota_share": round(s.quota_share, 4),
                "avg_share_when_active": round(avg_share, 4),
                "avg_entitlement_when_active": round(entitled, 4),
                "share_vs_entitlement": None if versus is None else round(versus, 4),
                "share_to_quota": None if ratio is None else round(ratio, 4),
                "active_hours": round(s.active_s / 3600, 2),
                "avg_jct_s": round(sum(s.jct) / len(s.jct), 1) if s.jct else 0.0,
                "borrowed_hours": {NAMES[r]: round(s.borrowed[r] / 3600, 2) for r in range(3)},
                "used_hours": {NAMES[r]: round(s.used[r] / 3600, 2) for r in range(3)},
                "share_over_time": _timeline(s.buckets),
            }
        borrowed = {
            NAMES[r]: round(sum(s.borrowed[r] for s in self.teams.values()) / 3600, 2)
            for r in range(3)
        }
        return Report(
            policy=policy,
            jobs=len(self.jcts),
            avg_jct_s=sum(self.jcts) / len(self.jcts) if self.jcts else 0.0,
            p95_jct_s=percentile(self.jcts, 0.95),
            avg_wait_s=sum(self.waits) / len(self.waits) if self.waits else 0.0,
            makespan_s=makespan,
            utilization=util,
            jain_fairness=jain(vs_entitled),
            jain_fairness_quota=jain(ratios),
            preemptions=self.preemptions,
            resizes=self.resizes,
            lost_work_s=self.lost_work_s,
            borrowed_hours=borrowed,
            teams=teams,
        )


def _timeline(buckets: dict[int, list[float]]) -> list[list[float]]:
    """[hour, average dominant share] at most TIMELINE_POINTS points, over active time."""
    if not buckets:
        return []
    keys = sorted(buckets)
    step = max(1, -(-len(keys) // TIMELINE_POINTS))
    out = []
    for i in range(0, len(keys), step):
        chunk = keys[i : i + step]
        share = sum(buckets[k][0] for k in chunk)
        span = sum(buckets[k][1] for k in chunk)
        out.append([round(chunk[0] * TIMELINE_BUCKET_S / 3600, 1), round(share / span, 4)])
    return out


@dataclass(frozen=True)
class Report:
    policy: str
    jobs: int
    avg_jct_s: float
    p95_jct_s: float
    avg_wait_s: float
    makespan_s: float
    utilization: dict[str, float]
    jain_fairness: float  # over share ÷ entitlement (fairness.py)
    jain_fairness_quota: float  # over share ÷ quota share
    preemptions: int
    resizes: int
    lost_work_s: float  # progress preempted jobs lost (since their last checkpoint)
    borrowed_hours: dict[str, float]
    teams: dict[str, dict[str, Any]]

    def as_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "jobs": self.jobs,
            "avg_jct_s": round(self.avg_jct_s, 1),
            "p95_jct_s": round(self.p95_jct_s, 1),
            "avg_wait_s": round(self.avg_wait_s, 1),
            "makespan_s": round(self.makespan_s, 1),
            "utilization": {k: round(v, 4) for k, v in self.utilization.items()},
            "jain_basis": "entitlement",
            "jain_fairness": round(self.jain_fairness, 4),
            "jain_fairness_quota": round(self.jain_fairness_quota, 4),
            "preemptions": self.preemptions,
            "resizes": self.resizes,
            "lost_work_s": round(self.lost_work_s, 1),
            "borrowed_hours": self.borrowed_hours,
            "teams": self.teams,
        }

    def as_text(self) -> str:
        u = self.utilization
        lines = [
            f"policy {self.policy}: {self.jobs} jobs",
            f"  job completion time  avg {self.avg_jct_s:,.0f} s   p95 {self.p95_jct_s:,.0f} s"
            f"   (avg wait {self.avg_wait_s:,.0f} s)",
            f"  makespan             {self.makespan_s:,.0f} s",
            f"  utilization          cpu {u['cpu']:.1%}  memory {u['memory_mb']:.1%}"
            f"  gpu {u['gpu']:.1%}",
            f"  Jain's fairness      {self.jain_fairness:.3f} (share/entitlement)"
            f"   {self.jain_fairness_quota:.3f} (share/quota share)",
            f"  preemptions          {self.preemptions}   (resizes {self.resizes},"
            f" work lost {self.lost_work_s:,.0f} s)",
            "  borrowed             "
            + "  ".join(f"{k} {v:,.1f} h" for k, v in self.borrowed_hours.items()),
            "  team          jobs  quota  share(active)  share/entitled  share/quota  avg JCT s",
        ]
        for name, t in self.teams.items():
            ratio = "-" if t["share_to_quota"] is None else f"{t['share_to_quota']:.2f}"
            versus = (
                "-" if t["share_vs_entitlement"] is None else f"{t['share_vs_entitlement']:.2f}"
            )
            lines.append(
                f"  {name:<12} {t['jobs']:>5}  {t['quota_share']:.3f}  "
                f"{t['avg_share_when_active']:>13.3f}  {versus:>14}  {ratio:>11}"
                f"  {t['avg_jct_s']:>9,.0f}"
            )
        return "\n".join(lines)


__all__ = ["Recorder", "Report", "Resources", "jain", "percentile"]
