"""Which `trainhub-runtime` this process runs, and the one rule for a version on the wire.

The agent reports its version at enrollment and in heartbeats; the control plane compares
it with its own (`runtime_version()` on the server) to flag outdated agents.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import ps_runtime

DIST_NAME = "trainhub-runtime"
MAX_VERSION_LENGTH = 64
# PEP 440 versions, normalized or not (`0.1.0`, `1.2.0rc1`, `0.1.0+g1a2b3c`, `1!2.0.post1`).
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!_-]*")


def source_root() -> Path | None:
    """The repository root when this process runs the runtime from a source tree."""
    root = Path(ps_runtime.__file__).resolve().parent.parent
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None
    return root if project.get("name") == DIST_NAME else None


def runtime_version() -> str:
    """The version of the runtime this process runs: the source tree's `pyproject.toml`
    when run from one (an editable install's metadata goes stale), else the installed
    distribution's.

    Raises:
        importlib.metadata.PackageNotFoundError: neither (a bare copy of the package).
    """
    root = source_root()
    if root is not None:
        project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
        return str(project["version"])
    return importlib.metadata.version(DIST_NAME)


def known_runtime_version() -> str | None:
    """`runtime_version()`, or None when this copy of the runtime has no version."""
    try:
        return runtime_version()
    except importlib.metadata.PackageNotFoundError:
        return None


def check_version(text: str) -> str:
    """`text` when it is a version string an agent may report, else `ValueError` saying why."""
    if not text:
        raise ValueError("must not be empty")
    if len(text) > MAX_VERSION_LENGTH:
        raise ValueError(f"must be at most {MAX_VERSION_LENGTH} characters, got {len(text)}")
    if not _VERSION.fullmatch(text):
        raise ValueError(
            f"must be a version such as 0.1.0 (letters, digits, '.', '+', '!', '_', '-'), "
            f"got {text!r}"
        )
    return text
