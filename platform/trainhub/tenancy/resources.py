"""An amount of the three scheduled resources: CPU cores, memory (MiB) and GPUs."""

from __future__ import annotations

from dataclasses import asdict, dataclass

EPSILON = 1e-9
RESOURCE_NAMES = ("cpu", "memory_mb", "gpu")


@dataclass(frozen=True)
class Resources:
    cpu: float = 0.0
    memory_mb: int = 0
    gpu: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu + other.cpu, self.memory_mb + other.memory_mb, self.gpu + other.gpu
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu - other.cpu, self.memory_mb - other.memory_mb, self.gpu - other.gpu
        )

    def clamp_at_zero(self) -> Resources:
        return Resources(max(0.0, self.cpu), max(0, self.memory_mb), max(0, self.gpu))

    def exceeding(self, limit: Resources | LimitResources) -> list[str]:
        """Names of the resources where this amount is above `limit` (None = no limit)."""
        over = []
        for name in RESOURCE_NAMES:
            cap = getattr(limit, name)
            if cap is not None and getattr(self, name) > cap + EPSILON:
                over.append(name)
        return over

    def as_dict(self) -> dict[str, float | int]:
        return {"cpu": round(self.cpu, 6), "memory_mb": self.memory_mb, "gpu": self.gpu}


@dataclass(frozen=True)
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
