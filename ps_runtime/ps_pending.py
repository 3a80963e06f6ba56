"""Handles on PS calls in flight, as `PSClient`'s `*_async` methods return them.

Each `result()` waits; a push retries transport errors with the same origin, which the
PS applies once (see `PSClient`).
"""

from __future__ import annotations

import time
from typing import Any

import grpc
import numpy as np

from ps_runtime.wire import decode_tensor

RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
PUSH_ATTEMPTS = 3


class PendingRows:
    """Rows being pulled; `result()` waits and assembles them in request order."""

    def __init__(
        self, parts: list[tuple[np.ndarray, Any]], out: np.ndarray, inverse: np.ndarray | None
    ) -> None:
        self._parts = parts
        self._out = out
        self._inverse = inverse

    def result(self) -> np.ndarray:
        """The pulled rows ([len(ids), dim], or [unique, dim] when asked for unique)."""
        for pos, fut in self._parts:
            self._out[pos] = decode_tensor(fut.result())
        self._parts = []
        return self._out if self._inverse is None else self._out[self._inverse]


class PendingDense:
    """A dense value being pulled; `result()` waits for it."""

    def __init__(self, future: Any, decode: bool) -> None:
        self._future = future
        self._decode = decode

    def result(self) -> np.ndarray:
        """The pulled value."""
        value = self._future.result()
        return decode_tensor(value) if self._decode else value


class PendingPush:
    """Pushes in flight; `result()` waits, retrying transport errors with the same origin."""

    def __init__(self, calls: list[tuple[Any, Any, Any]], kw: dict[str, Any]):
        self._calls = calls
        self._kw = kw

    def result(self) -> None:
        """Wait for every shard's push; raise the first non-transport error."""
        for method, request, fut in self._calls:
            for attempt in range(1, PUSH_ATTEMPTS + 1):
                try:
                    fut.result()
                    break
                except grpc.RpcError as e:
                    if e.code() not in RETRYABLE or attempt == PUSH_ATTEMPTS:
                        raise
                    time.sleep(0.1 * attempt)
                    fut = method.future(request, **self._kw)
        self._calls = []
