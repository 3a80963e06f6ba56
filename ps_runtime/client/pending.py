"""Handles on PS calls in flight, as `PSClient`'s `*_async` methods return them.

Each part is a `wait()` that returns the call's value (pulled data already in place);
it retries or fails over as `routes.Routes.settle` does (a push with the same origin,
which the PS applies once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Wait = Callable[[], Any]


class PendingRows:
    """Rows being pulled; each part lands in its rows of `out` as it arrives, and
    `result()` waits for them all."""

    def __init__(self, waits: list[Wait], out: np.ndarray, inverse: np.ndarray | None) -> None:
        self._waits = waits
        self._out = out
        self._inverse = inverse

    def result(self) -> np.ndarray:
        """The pulled rows ([len(ids), dim], or [unique, dim] when asked for unique)."""
        for wait in self._waits:
            wait()
        self._waits = []
        return self._out if self._inverse is None else self._out[self._inverse]


class PendingDense:
    """A dense value being pulled; `result()` waits for it."""

    def __init__(self, wait: Wait) -> None:
        self._wait = wait

    def result(self) -> np.ndarray:
        """The pulled value."""
        value: np.ndarray = self._wait()
        return value


class PendingPush:
    """Pushes in flight; `result()` waits for every shard's (retried as `Routes` says)."""

    def __init__(self, waits: list[Wait]):
        self._waits = waits

    def result(self) -> None:
        """Wait for every shard's push; raise the first error that stays."""
        for wait in self._waits:
            wait()
        self._waits = []
