"""`report(step=..., **values)`: one JSON line per call, to the agent's pipe or stdout.

The same pipe carries what the platform's stall detection reads (docs/protocol.md §2):
`phase(name)` marks a stretch without training steps on purpose (an evaluation, a
checkpoint), and the coordinator's completed closures count as progress
(`closure_completed`, at most one line every `PROGRESS_EVERY_SECONDS`). Those lines go to
the agent only: without `TRAINHUB_METRICS_FD` they are not written at all.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from ps_runtime import taskenv

_lock = threading.Lock()  # guards _stream and serializes writes
_stream: IO[str] | None = None
_stream_fd: int | None = None


def _output() -> IO[str]:
    """The metrics stream: the fd in TRAINHUB_METRICS_FD (opened once) or stdout."""
    global _stream, _stream_fd
    fd = taskenv.METRICS_FD.read()
    if fd is None:
        return sys.stdout
    if _stream is None or _stream_fd != fd:
        try:
            _stream = os.fdopen(fd, "w", buffering=1, encoding="utf-8", closefd=False)
        except OSError as e:
            raise taskenv.TaskEnvError(
                f"{taskenv.METRICS_FD.name}={fd} is not an open, writable file descriptor: {e}"
            ) from None
        _stream_fd = fd
    return _stream


def _jsonable(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    return item() if callable(item) and getattr(value, "ndim", 1) == 0 else value


def report(step: int, **values: Any) -> None:
    """Report metric values at `step`, e.g. report(step=100, train_loss=0.93).

    Writes `{"step": …, "time": "<ISO 8601 UTC>", "values": {…}}` as one line; safe to
    call from several threads.
    """
    if not values:
        raise ValueError("report() needs at least one value, e.g. report(step=1, loss=0.5)")
    line = json.dumps(
        {
            "step": int(step),
            "time": dt.datetime.now(dt.UTC).isoformat(),
            "values": {k: _jsonable(v) for k, v in values.items()},
        }
    )
    with _lock:
        out = _output()
        out.write(line + "\n")
        out.flush()


# -- stall detection: progress and phases (docs/protocol.md §2) -------------------------

# The coordinator's completed closures are told at most this often: enough for a stall
# limit of seconds, one line (and one database update) per job every few seconds.
PROGRESS_EVERY_SECONDS = 2.0
PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_progress_lock = threading.Lock()  # guards the two counters below
_closures = 0
_progress_told = -PROGRESS_EVERY_SECONDS  # time.monotonic() of the last progress line


def _tell_agent(document: dict[str, Any]) -> None:
    """One line for the agent's stall detection; nothing without an agent's pipe."""
    if taskenv.METRICS_FD.read() is None:
        return
    line = json.dumps({**document, "time": dt.datetime.now(dt.UTC).isoformat()})
    with _lock:
        out = _output()
        out.write(line + "\n")
        out.flush()


def closure_completed() -> None:
    """Count a closure the coordinator saw complete; the count goes to the agent as
    progress at most every `PROGRESS_EVERY_SECONDS` (cheap enough to call per closure)."""
    global _closures, _progress_told
    with _progress_lock:
        _closures += 1
        now = time.monotonic()
        if now - _progress_told < PROGRESS_EVERY_SECONDS:
            return
        _progress_told, count = now, _closures
    _tell_agent({"progress": {"closures": count}})


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Mark a stretch in which training makes no steps on purpose, e.g.
    `with phase("evaluation"): ...`: the platform's stall detection does not count it.

    The runtime marks its own checkpoints ("checkpoint") and evaluations ("evaluation");
    `name` is lower-case letters, digits and `_`, at most 32 characters. Phases may nest.
    """
    if not PHASE_NAME.fullmatch(name):
        raise ValueError(
            f"phase name {name!r}: use lower-case letters, digits and '_', starting with a "
            "letter, at most 32 characters (e.g. 'evaluation')"
        )
    _tell_agent({"phase": name, "state": "begin"})
    try:
        yield
    finally:
        _tell_agent({"phase": name, "state": "end"})
