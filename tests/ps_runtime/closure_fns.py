"""Module-level functions that tests schedule on workers (closures go by reference)."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

_loads = 0
_loads_lock = threading.Lock()


def add(a: Any, b: Any) -> Any:
    """a + b (arrays come back as arrays)."""
    return a + b


def fail(message: str) -> None:
    """Raise ValueError(message)."""
    raise ValueError(message)


def load_counter(path: str) -> dict[str, Any]:
    """A 'dataset' that counts how often it was built in this process."""
    global _loads
    with _loads_lock:
        _loads += 1
        return {"path": path, "loads": _loads, "pid": os.getpid()}


def read_dataset(dataset: dict[str, Any]) -> dict[str, Any]:
    """Return the per-worker dataset value."""
    return dataset


def push_rows(table: Any, ids: list[int], grads: np.ndarray) -> None:
    """Push row gradients from a worker."""
    table.push_gradients(np.asarray(ids), grads)


def slow_identity(x: Any, seconds: float) -> Any:
    """Sleep, then return x."""
    import time

    time.sleep(seconds)
    return x


def record(path: str, closure_id: int, seconds: float) -> dict[str, int]:
    """Sleep, append `closure_id pid` to `path`, return them (at-least-once evidence)."""
    import time

    time.sleep(seconds)
    with open(path, "a") as f:
        f.write(f"{closure_id} {os.getpid()}\n")
    return {"id": closure_id, "pid": os.getpid()}


def worker_pid() -> int:
    """The worker process's pid."""
    return os.getpid()
