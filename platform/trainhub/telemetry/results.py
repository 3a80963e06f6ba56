"""What a job's entrypoint returned: the coordinator prints it as one JSON log line
(`ps_runtime.task`), which the job page shows as rows, on load and over the live feed."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from trainhub.jobs.choices import TaskRole

from .logchunks import iter_lines
from .models import LogChunk

RESULT_PREFIX = '{"result": '
COORDINATOR_SOURCE = f"{TaskRole.COORDINATOR}-0"
# Longer result values (histories, lists) are cut to this many characters on the page.
RESULT_VALUE_CHARS = 160

ResultRows = list[tuple[str, str]]


def parse_result_line(line: str) -> Any:
    """The value of a coordinator's result line; None if the line is not one."""
    if not line.startswith(RESULT_PREFIX):
        return None
    try:
        return json.loads(line)["result"]
    except (ValueError, KeyError, TypeError):
        return None


def coordinator_result(job_id: int) -> Any:
    """What the job's entrypoint returned, as its coordinator last printed it; None if it
    did not (yet). Callers ask only of ended jobs: the line comes just before the end."""
    chunks = LogChunk.objects.filter(
        job_id=job_id, source=COORDINATOR_SOURCE, lines__contains=RESULT_PREFIX
    )
    for line in iter_lines(chunks, descending=True):
        if line.line.startswith(RESULT_PREFIX):
            return parse_result_line(line.line)
    return None


def result_in_lines(lines: Iterable[Mapping[str, Any]]) -> Any:
    """The result among freshly ingested log lines (`{source, line, …}`); None if none."""
    found = None
    for line in lines:
        if line.get("source") == COORDINATOR_SOURCE:
            value = parse_result_line(str(line.get("line", "")))
            if value is not None:
                found = value
    return found


def _shown_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= RESULT_VALUE_CHARS else text[: RESULT_VALUE_CHARS - 1] + "…"


def result_rows(result: Any) -> ResultRows:
    """The result as (name, value) rows; a result that is not a mapping is one row."""
    if result is None:
        return []
    if isinstance(result, dict):
        return [(str(key), _shown_value(value)) for key, value in result.items()]
    return [("result", _shown_value(result))]
