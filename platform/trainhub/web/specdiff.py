"""Job specs side by side: each spec flattened to dotted paths (`workers.min`), and the
paths whose values differ between the jobs (the compare page)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MISSING = "—"  # a path one spec has and another has not


def flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """`{"workers": {"min": 1}}` → `{"workers.min": "1"}`, in document order.

    Lists and scalars are leaves, written as JSON (strings as they are), so `1` and `1.0`,
    or `"1"` and `1`, show, and compare, as the spec has them."""
    flat: dict[str, str] = {}
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{path}."))
        elif isinstance(value, str):
            flat[path] = value
        else:
            flat[path] = json.dumps(value, sort_keys=True)
    return flat


@dataclass(frozen=True)
class SpecRow:
    path: str
    values: tuple[str, ...]  # one per job, in the jobs' order


@dataclass(frozen=True)
class SpecDiff:
    different: list[SpecRow]
    same: list[SpecRow]


def spec_diff(specs: Sequence[Mapping[str, Any]]) -> SpecDiff:
    """Rows of every path of any spec (in the order they first appear), split into those
    whose values differ between the specs and those all share."""
    flats = [flatten(spec) for spec in specs]
    paths: dict[str, None] = {}
    for flat in flats:
        paths.update(dict.fromkeys(flat))
    different: list[SpecRow] = []
    same: list[SpecRow] = []
    for path in paths:
        row = SpecRow(path, tuple(flat.get(path, MISSING) for flat in flats))
        (same if len(set(row.values)) == 1 else different).append(row)
    return SpecDiff(different, same)
