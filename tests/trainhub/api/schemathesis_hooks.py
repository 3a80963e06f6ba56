"""Schemathesis hooks for `test_schemathesis.py`: three in four path parameters of the
schema's type name objects that exist (from `TRAINHUB_FUZZ_IDS`), so the fuzzing reaches
past the 404s into the views; the rest stay as generated and check the 404s, and values of
another type (negative cases) are never replaced, so they stay invalid."""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import schemathesis

# {"jobs": {"id": 1}, "teams": {"slug": "recsys", "username": "root"}, ...}: by the path's
# first segment after /api/v1/.
REAL: dict[str, dict[str, Any]] = json.loads(os.environ.get("TRAINHUB_FUZZ_IDS", "{}"))


@schemathesis.hook
def map_path_parameters(
    context: Any, path_parameters: dict[str, Any] | None
) -> dict[str, Any] | None:
    if not path_parameters:
        return path_parameters
    resource = context.operation.path.removeprefix("/api/v1/").split("/")[0]
    real = REAL.get(resource, {})
    for name, value in path_parameters.items():
        if name not in real or not _same_type(value, real[name]):
            continue  # a value of the wrong type is a negative case: keep it
        # A stable choice per generated value, so a failure reproduces.
        if zlib.crc32(repr(value).encode()) % 4 != 0:
            path_parameters[name] = real[name]
    return path_parameters


def _same_type(generated: Any, real: Any) -> bool:
    """Whether `generated` is of the schema's type, as the real value is (no bools for ids)."""
    return type(generated) is type(real)
