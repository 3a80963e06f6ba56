"""What an enrollment token's limits say about the node a machine declares itself to be."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .models import EnrollmentToken

_LIMITS = (
    ("cpus", "max_cpus", "CPUs"),
    ("memory_mb", "max_memory_mb", "MB of memory"),
    ("gpus", "max_gpus", "GPUs"),
)


@dataclass(frozen=True)
class Refusal:
    field: str
    message: str


def _number(value: float) -> str:
    """4.0 as 4, 0.5 as 0.5, 1048576 in full (not as 1.04858e+06)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def refusal(token: EnrollmentToken, facts: Mapping[str, Any], *, hint: str) -> Refusal | None:
    """Why the node is refused: it declares more than the token allows, or a GPU twice;
    None when it is within the token's limits."""
    indices = [int(g["index"]) for g in facts.get("gpus") or []]
    repeated = sorted(i for i, n in Counter(indices).items() if n > 1)
    if repeated:
        return Refusal(
            "gpus", f"GPU index {repeated[0]} is listed more than once; list each GPU once."
        )
    declared = {"cpus": float(facts["cpus"]), "memory_mb": facts["memory_mb"], "gpus": len(indices)}
    for name, limit_name, unit in _LIMITS:
        limit = getattr(token, limit_name)
        if limit is not None and declared[name] > limit:
            return Refusal(
                name,
                f"This enrollment token lets a node offer at most {_number(limit)} {unit}; "
                f"this node declares {_number(declared[name])}. For a token whose "
                f"{limit_name} allows it, {hint}.",
            )
    return None
