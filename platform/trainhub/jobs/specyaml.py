"""A job spec written as YAML (JSON is YAML too), read one way by the submit page and by
`trainhub submit` (the API takes JSON only).

Bounded, so that a few hundred bytes cannot hold a worker: at most `MAX_SPEC_BYTES`, no
anchors or aliases (nested aliases, the "billion laughs", expand a few lines into
gigabytes once loaded), nested at most `MAX_DEPTH` deep. A spec needs none of them.

Booleans are YAML 1.2's: `true` and `false` only. YAML 1.1 (PyYAML's default) also reads
`on`, `off`, `yes`, `no` as booleans, which would turn `retry: {on: [node_lost]}` into a
key `True`.

This module imports no Django, so the CLI may use it.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_SPEC_BYTES = 64 * 1024
MAX_DEPTH = 64


class SpecYamlError(ValueError):
    """The text is not a spec document this reads; `message` says why, in a sentence."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Refused(yaml.YAMLError):
    """Valid YAML that a spec may not use (anchors, aliases, deep nesting)."""

    def __init__(self, problem: str, mark: yaml.Mark, fix: str) -> None:
        super().__init__(problem)
        self.message = f"{problem}{_where(mark)}: {fix}."


class _SpecLoader(yaml.SafeLoader):
    """`SafeLoader` that refuses anchors and aliases before it resolves any, and deep
    nesting before Python's recursion limit does (the composer recurses per level)."""

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(
                "YAML anchors and aliases (&name, *name) are not allowed",
                event.start_mark,
                "write each value out in full",
            )
        if self._depth >= MAX_DEPTH:
            raise _Refused(
                f"Nested more than {MAX_DEPTH} levels deep", event.start_mark, "flatten it"
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_BOOL = "tag:yaml.org,2002:bool"
_SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_SpecLoader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _where(mark: yaml.Mark | None) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""


def load_spec_yaml(text: str | bytes) -> Any:
    """The document in `text` (a str, or bytes in UTF-8 or UTF-16 as a file holds them).

    Raises:
        SpecYamlError: too long, not YAML, or YAML that uses anchors, aliases or deep
            nesting; its message says which and where.
    """
    size = len(text.encode("utf-8", "replace")) if isinstance(text, str) else len(text)
    if size > MAX_SPEC_BYTES:
        raise SpecYamlError(
            f"Longer than {MAX_SPEC_BYTES // 1024} KiB ({MAX_SPEC_BYTES} bytes), "
            "the most a job spec may be."
        )
    try:
        return yaml.load(text, Loader=_SpecLoader)  # a SafeLoader: plain data only
    except _Refused as exc:
        raise SpecYamlError(exc.message) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecYamlError(f"Not valid YAML{_where(mark)}: {problem}.") from exc
