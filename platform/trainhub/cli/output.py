"""Tables for people, JSON for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(table(headers, rows))


def amount(resources: dict[str, Any] | None) -> str:
    if not resources:
        return "-"
    parts = []
    for key, label in (("cpu", "cpu"), ("memory_mb", "mem"), ("gpu", "gpu")):
        value = resources.get(key)
        if value is None:
            parts.append(f"{label} ∞")
        elif key == "memory_mb":
            parts.append(f"{label} {value}Mi")
        else:
            parts.append(f"{label} {value:g}")
    return ", ".join(parts)
