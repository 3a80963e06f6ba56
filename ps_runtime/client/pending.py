"""Handles on PS calls in flight, as `PSClient`'s `*_async` methods return them.

Each part is a `wait()` that returns the call's reply; it retries or fails over as
`routes.Routes.settle` does (a push with the same origin, which the PS applies once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ps_runtime.wire.codec import decode_tensor

Wait = Callable[[], Any]


class PendingRows:
    """Rows being pulled; `result()` waits and assembles them in request order."""

    def __init__(
        self, parts: list[tuple[np.ndarray, Wait]], out: np.ndarray, inverse: np.ndarray | None
    ) -> None:
        self._parts = parts
        self._out = out
        self._inverse = inverse

    def result(self) -> np.ndarray:
        """The pulled rows ([len(ids), dim], or [unique, dim] when asked for unique)."""
        for pos, wait in self._parts:
            self._out[pos] = decode_tensor(wait())
        self._parts = []
        return self._out if self._inverse is None else self._out[self._inverse]


class PendingDense:
    """A dense value being pulled; `result()` waits for it."""

    def __init__(self, wait: Wait, decode: bool) -> None:
        self._wait = wait
        self._decode = decode

    def result(self) -> np.ndarray:
        """The pulled value."""
        value = self._wait()
        return decode_tensor(value) if self._decode else value


class PendingPush:
    """Pushes in flight; `result()` waits for every shard's (retried as `Routes` says)."""

    def __init__(self, waits: list[Wait]):
        self._waits = waits

    def result(self) -> None:
        """Wait for every shard's push; raise the first error that stays."""
        for wait in self._waits:
            wait()
        self._waits = []
