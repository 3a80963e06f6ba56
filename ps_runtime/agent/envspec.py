"""A job's own Python environment as the desired-tasks document carries it, and the one
check of its requirement lines that both the control plane (at submission) and the agent
(before it runs uv) apply.

A requirement is a package name with optional extras, version specifiers and an
environment marker (`torch>=2.3`, `pandas[performance]==2.2.*`, `numpy; python_version >
"3.10"`). Options (`--index-url`, `-e`, `-r`), direct references (`pkg @ https://…`) and
paths are refused: the node's package index settings decide where packages come from,
and nothing a user writes may make the agent read a file of the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ps_runtime.agent.fields import JsonObject, ProtocolError, as_str, join

MAX_REQUIREMENTS = 200
MAX_REQUIREMENT_CHARS = 200
DEFAULT_TIMEOUT_SECONDS = 900.0
MIN_TIMEOUT_SECONDS = 10.0
MAX_TIMEOUT_SECONDS = 4 * 3600.0

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_EXTRAS = r"(?:\s*\[\s*" + _NAME + r"(?:\s*,\s*" + _NAME + r")*\s*\])?"
_VERSION = r"[A-Za-z0-9.*+!]+"
_SPEC = r"(?:===|==|!=|~=|<=|>=|<|>)\s*" + _VERSION
_SPECS = r"(?:\s*\(?\s*" + _SPEC + r"(?:\s*,\s*" + _SPEC + r")*\s*\)?)?"
_MARKER_TERM = (
    r"\(?\s*[a-z_]+\s*(?:===|==|!=|~=|<=|>=|<|>|not\s+in|in)\s*(?:'[^']*'|\"[^\"]*\")\s*\)?"
)
_MARKER = rf"(?:\s*;\s*{_MARKER_TERM}(?:\s+(?:and|or)\s+{_MARKER_TERM})*)?"
REQUIREMENT = re.compile(rf"^{_NAME}{_EXTRAS}{_SPECS}{_MARKER}\s*$")
PYTHON_VERSION = re.compile(r"^3\.[0-9]{1,2}$")


def requirement_problem(line: str) -> str | None:
    """Why `line` is not an acceptable requirement, or None when it is."""
    text = line.strip()
    if not text:
        return "is empty"
    if len(text) > MAX_REQUIREMENT_CHARS:
        return f"is longer than {MAX_REQUIREMENT_CHARS} characters"
    if text.startswith("-"):
        return (
            f"{text.split()[0]!r} is an option, not a requirement: the node's package index "
            "settings decide where packages come from"
        )
    if "@" in text or "/" in text or "\\" in text or ":" in text:
        return (
            "is a direct reference or a path; name a package from the index instead "
            "(like 'torch>=2.3')"
        )
    if not REQUIREMENT.match(text):
        return "is not a requirement like 'torch', 'numpy>=1.26' or 'pandas[performance]==2.2.*'"
    return None


def requirements_from_text(text: str) -> list[str]:
    """The requirement lines of a requirements.txt: comments and blank lines dropped
    (each remaining line is checked by `requirement_problem` where it is used)."""
    lines = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line:
            lines.append(line)
    return lines


@dataclass(frozen=True, slots=True)
class JobEnvironment:
    """The packages a job's tasks import beside the runtime, and the Python they run on.

    `python` empty means the node's own task interpreter; `timeout_seconds` ends a build
    that takes longer (a hanging index, a huge download)."""

    requirements: tuple[str, ...]
    python: str = ""
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    def to_wire(self) -> dict[str, Any]:
        return {
            "requirements": list(self.requirements),
            "python": self.python,
            "timeout_seconds": self.timeout_seconds,
        }

    @classmethod
    def from_fields(cls, fields: JsonObject) -> JobEnvironment:
        items = fields.items("requirements")
        if len(items) > MAX_REQUIREMENTS:
            raise ProtocolError(
                f"{fields.at('requirements')} has more than {MAX_REQUIREMENTS} lines",
                fields.at("requirements"),
            )
        requirements = []
        for n, item in enumerate(items):
            path = join(fields.at("requirements"), n)
            line = as_str(item, path).strip()
            problem = requirement_problem(line)
            if problem is not None:
                raise ProtocolError(f"{path} {problem}", path)
            requirements.append(line)
        python = fields.optional_text("python") or ""
        if python and not PYTHON_VERSION.match(python):
            path = fields.at("python")
            raise ProtocolError(f"{path} must look like '3.11'", path)
        timeout = fields.optional_number("timeout_seconds", minimum=MIN_TIMEOUT_SECONDS)
        return cls(
            requirements=tuple(requirements),
            python=python,
            timeout_seconds=min(
                DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout, MAX_TIMEOUT_SECONDS
            ),
        )
