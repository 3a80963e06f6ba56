"""An amount of the three scheduled resources: CPU cores, memory (MiB) and GPUs.

The one resource arithmetic of the platform: quotas, caps and usage (tenancy, jobs, the
API) and the scheduling policy and simulator all use this class. It imports no Django (an
import-linter contract checks it), because the policy must not.

Amounts keep the numeric type they were built with: the platform's quotas and requests
hold whole MiB and GPUs (ints), the policy's arithmetic (`times`, shares of capacity,
`UNLIMITED`) works in floats. Comparisons allow `EPSILON` for float rounding.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# The largest quota amounts anyone may set (the API and the web forms refuse more).
MAX_CPU = 1_000_000.0
MAX_MEMORY_MB = 1 << 40
MAX_GPU = 100_000
EPSILON = 1e-9
RESOURCE_NAMES = ("cpu", "memory_mb", "gpu")


@dataclass(frozen=True, slots=True)
class Resources:
    cpu: float = 0.0
    memory_mb: float = 0
    gpu: float = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu + other.cpu, self.memory_mb + other.memory_mb, self.gpu + other.gpu
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu - other.cpu, self.memory_mb - other.memory_mb, self.gpu - other.gpu
        )

    def times(self, k: float) -> Resources:
        return Resources(self.cpu * k, self.memory_mb * k, self.gpu * k)

    def clamp_at_zero(self) -> Resources:
        return Resources(max(0.0, self.cpu), max(0, self.memory_mb), max(0, self.gpu))

    def fits_in(self, other: Resources) -> bool:
        return (
            self.cpu <= other.cpu + EPSILON
            and self.memory_mb <= other.memory_mb + EPSILON
            and self.gpu <= other.gpu + EPSILON
        )

    def exceeding(self, limit: Resources | LimitResources) -> list[str]:
        """Names of the resources where this amount is above `limit` (None = no limit)."""
        over = []
        for name in RESOURCE_NAMES:
            cap = getattr(limit, name)
            if cap is not None and getattr(self, name) > cap + EPSILON:
                over.append(name)
        return over

    @property
    def is_zero(self) -> bool:
        return self.cpu <= EPSILON and self.memory_mb <= EPSILON and self.gpu <= EPSILON

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.cpu, self.memory_mb, self.gpu)

    def as_dict(self) -> dict[str, float]:
        return {"cpu": round(self.cpu, 6), "memory_mb": self.memory_mb, "gpu": self.gpu}


ZERO = Resources()
UNLIMITED = Resources(math.inf, math.inf, math.inf)


@dataclass(frozen=True, slots=True)
class LimitResources:
    """Per-resource limits where None means unlimited."""

    cpu: float | None = None
    memory_mb: int | None = None
    gpu: int | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def describe(amount: Resources | LimitResources, names: list[str] | None = None) -> str:
    """`cpu 4, gpu 2` for error messages."""
    parts = []
    for name in names or RESOURCE_NAMES:
        value = getattr(amount, name)
        parts.append(f"{name} {'unlimited' if value is None else format(value, 'g')}")
    return ", ".join(parts)
