"""Whether a failed task restarts its job, from which budget, and after how long.

A restart fits its cause (`jobs.causes`). Causes in the spec's `retry.on` (by default a
lost node, a preemption, the network, a lost parameter server: none of them the job's
doing) restart it up to `retry.max` times without touching `max_restarts`; every other
cause that a restart can help spends one of `max_restarts`. A Python error with the same
type and last user frame as the failure that restarted the job last (`EndCause.signature`)
fails it at once: the same code fails the same way, and a typo should not burn every
restart in seconds. An environment that did not build fails the same way anywhere.

Restarts back off: the n-th restart from a budget waits `backoff_seconds * 2^(n-1)`, at
most `max_backoff_seconds`. Pure: the services (`services.restarts`) carry it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .causes import EndCause
from .jobspec import RETRY_CAUSES, RetrySpec

# Causes no restart helps, whatever the spec says.
NEVER_RESTART = frozenset({"environment_failed", "stopped", "succeeded"})


class Budget(StrEnum):
    NONE = "none"  # no restart
    USER = "user"  # max_restarts (`Job.restarts`)
    INFRA = "infra"  # retry.max (`Job.infra_restarts`)


@dataclass(frozen=True, slots=True)
class Spent:
    """What the job spent so far: `Job.restarts`, `Job.infra_restarts`, `Job.last_error`."""

    restarts: int = 0
    infra_restarts: int = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    budget: Budget
    delay_s: float = 0.0
    why: str = ""  # why not, when it does not restart; the count when it does

    @property
    def restart(self) -> bool:
        return self.budget != Budget.NONE


def backoff(spec: RetrySpec, spent: int) -> float:
    """The wait before the restart after `spent` earlier ones from the same budget."""
    if spec.backoff_seconds <= 0:
        return 0.0
    return float(min(spec.max_backoff_seconds, spec.backoff_seconds * 2.0 ** min(spent, 30)))


def decide(end: EndCause, retry: RetrySpec, max_restarts: int, spent: Spent) -> Decision:
    """Restart or not after the task end `end`, given the spec and what was spent."""
    cause = end.cause or "unknown"
    if cause in NEVER_RESTART or cause not in RETRY_CAUSES:
        return Decision(Budget.NONE, why=f"a restart does not help after {cause}")
    if cause in retry.on:
        if spent.infra_restarts >= retry.max:
            return Decision(
                Budget.NONE,
                why=f"after {_times(spent.infra_restarts)} for causes in the spec's "
                "retry.on, its retry.max",
            )
        return Decision(
            Budget.INFRA,
            backoff(retry, spent.infra_restarts),
            f"restart {spent.infra_restarts + 1} of {retry.max} for retry.on causes",
        )
    if end.signature and end.signature == spent.last_error:
        return Decision(
            Budget.NONE,
            why=f"the same error as the failure before ({end.signature}): restarting would "
            "fail the same way",
        )
    if spent.restarts >= max_restarts:
        why = f"after {_times(spent.restarts)}, the spec's max_restarts" if max_restarts else ""
        return Decision(Budget.NONE, why=why)
    return Decision(
        Budget.USER,
        backoff(retry, spent.restarts),
        f"restart {spent.restarts + 1} of {max_restarts}",
    )


def _times(n: int) -> str:
    return f"{n} restart{'' if n == 1 else 's'}"
