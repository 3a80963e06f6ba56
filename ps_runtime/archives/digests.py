"""`sha256:<hex>` digests of archives, and copying an upload or download while hashing it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Protocol

from .limits import CHUNK

DIGEST_PREFIX = "sha256:"


def sha256_file(path: Path) -> str:
    """`sha256:<hex>` of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    return DIGEST_PREFIX + digest.hexdigest()


class TooLarge(ValueError):
    """A copied stream went past its size limit (the partial copy is the caller's)."""


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


def copy_hashing(data: Readable, target: Path, limit: int) -> tuple[str, int]:
    """Copy `data` into a new file `target` (0600), refusing more than `limit` bytes;
    returns its `sha256:<hex>` digest and size.

    Raises:
        TooLarge: the stream is longer than `limit`.
    """
    digest = hashlib.sha256()
    size = 0
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        for chunk in iter(lambda: data.read(CHUNK), b""):
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"more than {limit} bytes")
            digest.update(chunk)
            out.write(chunk)
    return DIGEST_PREFIX + digest.hexdigest(), size


def is_digest(text: str) -> bool:
    hexpart = text.removeprefix(DIGEST_PREFIX)
    return (
        text.startswith(DIGEST_PREFIX)
        and len(hexpart) == 64
        and all(c in "0123456789abcdef" for c in hexpart)
    )
