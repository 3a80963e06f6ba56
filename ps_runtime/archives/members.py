"""An archive's members as the checks see them, and the error that refuses an archive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from .limits import MAX_NAME_BYTES


class UnsafeArchive(ValueError):
    """The archive is not a usable, safe `.tar.gz`/`.zip`; the message says why."""


@dataclass(frozen=True, slots=True)
class Member:
    """One entry of an archive, as the checks see it."""

    name: str  # normalized, relative, '/'-separated
    kind: str  # "file" | "dir" | "symlink" | "hardlink"
    size: int = 0
    link: str = ""  # symlink: the target as written; hardlink: the member it names
    executable: bool = False


Entry = tuple[Member, IO[bytes] | None]


@dataclass(frozen=True, slots=True)
class ArchiveInfo:
    format: str  # "tar.gz" | "zip"
    members: int
    unpacked_bytes: int


def too_large(limit: int) -> UnsafeArchive:
    return UnsafeArchive(f"the archive expands to more than {limit} bytes (10x the upload limit)")


def clean_name(raw: str) -> str:
    if not raw or "\x00" in raw or "\\" in raw:
        raise UnsafeArchive(f"member name {raw!r} is empty or holds NUL or '\\'")
    if len(raw.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise UnsafeArchive(f"a member name is longer than {MAX_NAME_BYTES} bytes")
    if raw.startswith("/"):
        raise UnsafeArchive(f"{raw!r} is an absolute path")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"{raw!r} contains '..'")
    if not parts:
        return "."
    return "/".join(parts)
