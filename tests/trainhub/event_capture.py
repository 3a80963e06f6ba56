"""Capturing the domain events a test's service calls publish (`trainhub.events`).

`settings.EVENT_HANDLERS` is pointed at `record` only (so the browser feed, the agent
gateway and the scheduler trigger stay out of unit tests), and `capture()` runs the
on-commit callbacks of the block it wraps, as a real commit would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from trainhub.events import Event

_RECEIVED: list[Event] = []

HANDLER = f"{__name__}.record"

Capture = Callable[[], AbstractContextManager[list[Event]]]


def record(event: Event) -> None:
    _RECEIVED.append(event)


def capturer(capture_on_commit: Any) -> Capture:
    """`capture_on_commit`: pytest-django's `django_capture_on_commit_callbacks` fixture."""

    @contextmanager
    def capture() -> Iterator[list[Event]]:
        _RECEIVED.clear()
        received: list[Event] = []
        with capture_on_commit(execute=True):
            yield received
        received.extend(_RECEIVED)

    return capture
