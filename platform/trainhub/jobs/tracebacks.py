"""The last Python traceback in a task's stderr, read back into its parts.

A task that dies of an uncaught exception prints it to stderr, and that text is all the
platform gets: the exception's type and message and the frames of the call stack. The
failure causes (`causes`) name the exception and the last frame of the user's own code,
not of a library or of the runtime, since that is where the user goes to fix it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_START = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)')
# `ValueError: bad`, `grpc._channel._InactiveRpcError: <…>`, or a bare `KeyboardInterrupt`.
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
# Frames that are not the user's code: installed packages, the runtime, the standard
# library and the interpreter's frozen modules.
_NOT_USER = ("site-packages/", "dist-packages/", "/ps_runtime/", "<frozen ", "/lib/python3")
MAX_MESSAGE = 200


@dataclass(frozen=True, slots=True)
class Frame:
    path: str
    line: int

    @property
    def where(self) -> str:
        """`train.py:12`: the file's name, short enough for a one-line hint."""
        return f"{self.path.rsplit('/', 1)[-1]}:{self.line}"


@dataclass(frozen=True, slots=True)
class PythonError:
    """An uncaught exception: its type (without a `builtins.` module), its message, every
    frame's file and line, and the last frame of user code (None when every frame was a
    library's or the runtime's)."""

    type: str
    message: str
    frames: tuple[Frame, ...]
    user_frame: Frame | None

    @property
    def short_type(self) -> str:
        """`_InactiveRpcError` for `grpc._channel._InactiveRpcError`."""
        return self.type.rsplit(".", 1)[-1]


def _is_user(frame: Frame) -> bool:
    return not any(part in frame.path for part in _NOT_USER)


def last_error(lines: Sequence[str]) -> PythonError | None:
    """The last traceback in `lines` (stderr, oldest first), or None when there is none.

    With chained exceptions ("During handling of the above exception…") the last one is
    the one that ended the process."""
    starts = [i for i, text in enumerate(lines) if text.rstrip() == _START]
    if not starts:
        return None
    frames: list[Frame] = []
    for text in lines[starts[-1] + 1 :]:
        if match := _FRAME.match(text):
            frames.append(Frame(match["path"], int(match["line"])))
            continue
        if text[:1].isspace() or not text.strip():
            continue  # a frame's source line, its ^^^^ markers, or a blank
        if match := _EXCEPTION.match(text.rstrip()):
            message = (match["message"] or "").strip()[:MAX_MESSAGE]
            users = [f for f in frames if _is_user(f)]
            return PythonError(
                type=match["type"].removeprefix("builtins."),
                message=message,
                frames=tuple(frames),
                user_frame=users[-1] if users else None,
            )
        return None  # the traceback was cut off by other output
    return None
