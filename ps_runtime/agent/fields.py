"""Strict reads of decoded JSON for the agent protocol; every refusal names the field.

JSON as Python decodes it is loose in ways that have hurt us: `true` is an `int`,
`NaN` and `Infinity` decode to floats (`cpu: inf` once stopped an agent's reconcile
loop), and a missing key is easy to default silently. These readers accept exactly the
JSON types docs/protocol.md names and raise `ProtocolError("<field path> must be …")`
otherwise. Unknown keys are ignored, so either side can add an optional field first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, NoReturn, TypeVar

E = TypeVar("E", bound=StrEnum)


class ProtocolError(ValueError):
    """A message or document does not match docs/protocol.md; the text names the field,
    and `path` holds it alone ("points[3].step"; "" when no single field is to blame)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def describe(value: object) -> str:
    """A short rendering of a bad value for an error message."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def refuse(path: str, expected: str, value: object) -> NoReturn:
    raise ProtocolError(f"{path} must be {expected}, got {describe(value)}", path)


def as_int(
    value: object, path: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """An integer (never a bool), within `minimum`..`maximum` when given."""
    if isinstance(value, bool) or not isinstance(value, int):
        refuse(path, "an integer", value)
    if minimum is not None and value < minimum:
        refuse(path, f"an integer >= {minimum}", value)
    if maximum is not None and value > maximum:
        refuse(path, f"an integer <= {maximum}", value)
    return value


def as_number(value: object, path: str, *, minimum: float | None = None) -> float:
    """A finite number (never a bool, NaN or infinity), at least `minimum` when given.

    An integer stays an `int` (a node's `memory_used_mb: 900` is shown as sent)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        refuse(path, "a finite number", value)
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        refuse(path, "a finite number", value)
    if not math.isfinite(number):
        refuse(path, "a finite number", value)
    if minimum is not None and number < minimum:
        refuse(path, f"a finite number >= {minimum:g}", value)
    return value


def as_str(value: object, path: str, *, non_empty: bool = False) -> str:
    if not isinstance(value, str):
        refuse(path, "a string", value)
    if non_empty and not value:
        refuse(path, "a non-empty string", value)
    return value


def as_log_line(value: object, path: str) -> str:
    """A line of a task's output; NUL characters and lone surrogates (what invalid UTF-8
    becomes on the way) are replaced by U+FFFD rather than refused: output is never
    fatal, and the database can store neither."""
    line = as_str(value, path)
    if "\x00" in line:
        line = line.replace("\x00", "\ufffd")
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = line.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return line


def as_choice(value: object, path: str, choices: type[E]) -> E:
    """One of a `StrEnum`'s values."""
    if isinstance(value, str):
        try:
            return choices(value)
        except ValueError:
            pass
    allowed = ", ".join(repr(c.value) for c in choices)
    refuse(path, f"one of {allowed}", value)


def as_time(value: object, path: str) -> datetime:
    """An ISO 8601 time with a timezone."""
    text = as_str(value, path)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        refuse(path, "an ISO 8601 time", value)
    if parsed.tzinfo is None:
        refuse(path, "an ISO 8601 time with a timezone", value)
    return parsed


def as_list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        refuse(path, "a list", value)
    return list(value)


def as_object(value: object, path: str, root: str = "message") -> Mapping[str, Any]:
    """A JSON object; `root` names it in errors when it has no path (the whole body)."""
    if not isinstance(value, Mapping):
        refuse(path or root, "a JSON object", value)
    for key in value:
        if not isinstance(key, str):
            refuse(join(path, str(key)), "named by a string key", key)
    return value


def join(path: str, name: str | int) -> str:
    """`join("tasks", 0)` → `tasks[0]`, `join("tasks[0]", "env")` → `tasks[0].env`."""
    if isinstance(name, int):
        return f"{path}[{name}]"
    return f"{path}.{name}" if path else name


class JsonObject:
    """Typed, strict access to one JSON object's fields, each error naming its path.

    A required field that is absent or `null` is refused; an optional one reads as None.
    """

    def __init__(self, value: object, path: str = "", root: str = "message") -> None:
        self.data = as_object(value, path, root)
        self.path = path

    def at(self, name: str) -> str:
        return join(self.path, name)

    def required(self, name: str) -> object:
        value = self.data.get(name)
        if value is None:
            raise ProtocolError(f"{self.at(name)} is required", self.at(name))
        return value

    def integer(self, name: str, *, minimum: int | None = None) -> int:
        return as_int(self.required(name), self.at(name), minimum=minimum)

    def optional_integer(
        self, name: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int | None:
        value = self.data.get(name)
        if value is None:
            return None
        return as_int(value, self.at(name), minimum=minimum, maximum=maximum)

    def number(self, name: str, *, minimum: float | None = None) -> float:
        return as_number(self.required(name), self.at(name), minimum=minimum)

    def optional_number(self, name: str, *, minimum: float | None = None) -> float | None:
        value = self.data.get(name)
        return None if value is None else as_number(value, self.at(name), minimum=minimum)

    def text(self, name: str, *, non_empty: bool = False) -> str:
        return as_str(self.required(name), self.at(name), non_empty=non_empty)

    def optional_text(self, name: str) -> str | None:
        value = self.data.get(name)
        return None if value is None else as_str(value, self.at(name))

    def optional_flag(self, name: str) -> bool:
        """A boolean field; absent or null is false."""
        value = self.data.get(name)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise ProtocolError(
                f"{self.at(name)} must be true or false, got {value!r}", self.at(name)
            )
        return value

    def choice(self, name: str, choices: type[E]) -> E:
        return as_choice(self.required(name), self.at(name), choices)

    def time(self, name: str) -> datetime:
        return as_time(self.required(name), self.at(name))

    def optional_time(self, name: str) -> datetime | None:
        value = self.data.get(name)
        return None if value is None else as_time(value, self.at(name))

    def items(self, name: str, *, required: bool = False) -> list[Any]:
        """A list field; absent or null is an empty list unless `required`."""
        value = self.required(name) if required else self.data.get(name)
        return as_list([] if value is None else value, self.at(name))

    def obj(self, name: str, *, required: bool = False) -> JsonObject:
        """A nested object; absent or null is an empty one unless `required`."""
        value = self.required(name) if required else self.data.get(name)
        return JsonObject({} if value is None else value, self.at(name))
