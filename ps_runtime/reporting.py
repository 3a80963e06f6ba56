"""`report(step=..., **values)`: one JSON line per call, to the agent's pipe or stdout."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import threading
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
