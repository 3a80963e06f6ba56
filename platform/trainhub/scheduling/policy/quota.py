"""Quota accounting: nominal quota, borrowing and lending limits, dominant-resource shares.

A team may use its nominal quota; beyond it, it borrows, per resource, from a pool made of
the other teams' idle nominal quota (each capped by that team's lending limit) plus any
capacity no team's quota covers, and never more than its own borrowing limit. The pool is
kept as one running sum, so admitting or removing work is O(1):

    pool[r] = unowned[r] + Σ_teams (lendable[r] - borrowed[r])   must stay ≥ 0
    lendable = min(lending_limit, max(0, nominal - used)), borrowed = max(0, used - nominal)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import EPSILON, Resources, Team

NAMES = ("cpu", "memory_mb", "gpu")


def _fmt(x: float) -> str:
    return f"{x:g}" if x < 1e6 else f"{x:.0f}"


@dataclass(frozen=True, slots=True)
class Admission:
    ok: bool
    borrows: bool = False
    reclaim: bool = False  # within nominal, but the team's idle quota is lent out
    pool_short: bool = False  # refused only because others borrowed all idle quota
    reason: str = ""


class QuotaBook:
    def __init__(self, teams: Sequence[Team], capacity: Resources) -> None:
        self.teams = {t.name: t for t in teams}
        self.capacity = capacity.as_tuple()
        self.nominal = {t.name: list(t.nominal.as_tuple()) for t in teams}
        self.blimit = {t.name: list(t.borrowing_limit.as_tuple()) for t in teams}
        self.llimit = {t.name: list(t.lending_limit.as_tuple()) for t in teams}
        self.used = {t.name: [0.0, 0.0, 0.0] for t in teams}
        total = [sum(t.nominal.as_tuple()[r] for t in teams) for r in range(3)]
        self.pool = [max(0.0, self.capacity[r] - total[r]) for r in range(3)]
        for name in self.teams:
            c = self._contribution(name, self.used[name])
            for r in range(3):
                self.pool[r] += c[r]
        # Dominant share of each team's nominal quota (its entitlement).
        self.quota_share = {
            name: max(
                (self.nominal[name][r] / self.capacity[r] for r in range(3) if self.capacity[r]),
                default=0.0,
            )
            for name in self.teams
        }

    def _contribution(self, team: str, used: Sequence[float]) -> list[float]:
        nom, lend = self.nominal[team], self.llimit[team]
        out = [0.0, 0.0, 0.0]
        for r in (0, 1, 2):
            spare = nom[r] - used[r]
            # spare > 0: lendable (capped by the lending limit); < 0: borrowed.
            out[r] = (lend[r] if lend[r] < spare else spare) if spare > 0 else spare
        return out

    def ensure(self, team: str) -> None:
        """Teams the snapshot does not list get a zero quota (they may only borrow)."""
        if team not in self.teams:
            self.teams[team] = Team(team, Resources())
            self.nominal[team] = [0.0, 0.0, 0.0]
            self.blimit[team] = [float("inf")] * 3
            self.llimit[team] = [float("inf")] * 3
            self.used[team] = [0.0, 0.0, 0.0]
            self.quota_share[team] = 0.0

    def _change(self, team: str, delta: Resources, sign: float) -> None:
        used = self.used[team]
        before = self._contribution(team, used)
        d = delta.as_tuple()
        for r in range(3):
            used[r] += sign * d[r]
        after = self._contribution(team, used)
        for r in range(3):
            self.pool[r] += after[r] - before[r]

    def add(self, team: str, delta: Resources) -> None:
        self._change(team, delta, 1.0)

    def remove(self, team: str, delta: Resources) -> None:
        self._change(team, delta, -1.0)

    def admit(
        self,
        team: str,
        demand: Resources,
        may_borrow: bool,
        no_borrow_why: str = "production jobs never borrow",
    ) -> Admission:
        """Whether `team` may take `demand` more (does not change the book)."""
        used, nom = self.used[team], self.nominal[team]
        d = demand.as_tuple()
        new = [used[r] + d[r] for r in range(3)]
        over = [r for r in range(3) if new[r] > nom[r] + EPSILON and d[r] > 0]
        before = self._contribution(team, used)
        after = self._contribution(team, new)
        pool_after = [self.pool[r] + after[r] - before[r] for r in range(3)]
        short = [r for r in range(3) if pool_after[r] < -EPSILON and d[r] > 0]
        if not over:
            if short:
                return Admission(ok=True, reclaim=True)
            return Admission(ok=True)
        exhausted = ", ".join(f"{NAMES[r]} {_fmt(used[r])}/{_fmt(nom[r])}" for r in over)
        if not may_borrow:
            return Admission(
                ok=False, reason=f"team quota exhausted: {exhausted} ({no_borrow_why})"
            )
        lim = self.blimit[team]
        beyond = [r for r in over if new[r] - nom[r] > lim[r] + EPSILON]
        if beyond:
            limits = ", ".join(
                f"{NAMES[r]} {_fmt(max(0.0, used[r] - nom[r]))}/{_fmt(lim[r])} borrowed"
                for r in beyond
            )
            return Admission(
                ok=False, reason=f"team quota exhausted: {exhausted}; borrowing limit: {limits}"
            )
        if short:
            idle = ", ".join(f"{NAMES[r]} {_fmt(max(0.0, self.pool[r]))} lendable" for r in short)
            return Admission(
                ok=False,
                pool_short=True,
                reason=f"team quota exhausted: {exhausted}; no idle quota to borrow ({idle})",
            )
        return Admission(ok=True, borrows=True)

    def is_borrowing(self, team: str) -> bool:
        used, nom = self.used[team], self.nominal[team]
        return any(used[r] > nom[r] + EPSILON for r in range(3))

    def dominant_share(self, team: str) -> float:
        used = self.used[team]
        return max(
            (used[r] / self.capacity[r] for r in range(3) if self.capacity[r] > 0), default=0.0
        )

    def fair_key(self, team: str) -> tuple[int, float]:
        """Teams furthest below their entitlement come first; quota-less teams last."""
        share = self.quota_share[team]
        if share <= 0:
            return (1, self.dominant_share(team))
        return (0, self.dominant_share(team) / share)
