"""Functions by reference ("module:qualname") and the per-worker resource cache."""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Callable
from typing import Any

_resolved: dict[str, Callable[..., Any]] = {}


def function_ref(fn: Callable[..., Any] | str) -> str:
    """Return the importable "module:qualname" of `fn` (strings pass through, checked)."""
    if isinstance(fn, str):
        if ":" not in fn:
            raise ValueError(f"function reference {fn!r} must look like 'package.module:function'")
        return fn
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise ValueError(
            f"{fn!r} cannot run on a worker: closures are sent by reference, so define the "
            "function at module level (no lambdas or nested functions)"
        )
    if module == "__main__":
        raise ValueError(
            f"{qualname} is defined in __main__, which workers cannot import; move it into "
            "an importable module"
        )
    return f"{module}:{qualname}"


def resolve_function(ref: str) -> Callable[..., Any]:
    """Import and return the function named by "module:qualname" (cached)."""
    fn = _resolved.get(ref)
    if fn is not None:
        return fn
    module_name, _, qualname = ref.partition(":")
    if not module_name or not qualname:
        raise ValueError(f"function reference {ref!r} must look like 'package.module:function'")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref} is not callable")
    resolved: Callable[..., Any] = obj
    _resolved[ref] = resolved
    return resolved


class PerWorkerResource:
    """A value built once per worker process by calling `fn(*args, **kwargs)` there.

    Pass it in closure arguments; the worker swaps in its cached value. Arguments must
    be plain JSON (they are also the cache key).
    """

    def __init__(self, fn: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> None:
        self.fn = function_ref(fn)
        self.args = list(args)
        self.kwargs = dict(kwargs)
        try:
            json.dumps([self.args, self.kwargs])
        except TypeError as e:
            raise TypeError(f"per-worker resource arguments must be JSON values: {e}") from None

    def to_wire(self) -> dict[str, Any]:
        """JSON form sent inside closure arguments."""
        return {"kind": "per_worker", "fn": self.fn, "args": self.args, "kwargs": self.kwargs}


class WorkerCache:
    """Thread-safe build-once cache: concurrent callers of one key wait for one build."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _values and _building
        self._values: dict[str, Any] = {}
        self._building: dict[str, threading.Event] = {}

    def get_or_create(self, key: str, factory: Callable[[], Any]) -> Any:
        """Return the value for `key`, calling `factory` only the first time."""
        while True:
            with self._lock:
                if key in self._values:
                    return self._values[key]
                event = self._building.get(key)
                if event is None:
                    event = self._building[key] = threading.Event()
                    break
            event.wait()  # another thread is building it; re-check (it may have failed)
        try:
            value = factory()
            with self._lock:
                self._values[key] = value
            return value
        finally:
            with self._lock:
                del self._building[key]
            event.set()

    def clear(self) -> None:
        """Forget every cached value."""
        with self._lock:
            self._values.clear()


WORKER_CACHE = WorkerCache()


def per_worker(key: str, factory: Callable[[], Any]) -> Any:
    """Return a value cached for this worker process, building it with `factory` once."""
    return WORKER_CACHE.get_or_create(key, factory)


def resolve_per_worker(data: dict[str, Any]) -> Any:
    """Return the worker's cached value of a PerWorkerResource sent as `data`."""
    key = json.dumps(data, sort_keys=True)
    fn = resolve_function(data["fn"])
    return per_worker(key, lambda: fn(*data["args"], **data["kwargs"]))
