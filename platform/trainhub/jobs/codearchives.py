"""Users' code archives: store an upload once per digest, and say who may use which.

An upload is copied to `CODE_DIR/.incoming/` while its sha256 is computed, scanned with
`ps_runtime.archives.scan` (the agent runs the same checks before unpacking), then moved
to `CODE_DIR/<hex>` unless that file is already there. A refused archive leaves neither
a file nor a row.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import transaction

from ps_runtime import archives
from ps_runtime.archives import DIGEST_PREFIX, UnsafeArchive, is_digest, read_member, scan
from trainhub.tenancy.models import Team

from .models import CodeArchive, CodeUpload

# An archive may expand to at most this many times the upload limit.
EXPANSION_FACTOR = 10


class CodeArchiveTooLarge(Exception):
    """The upload is over `TRAINHUB_CODE_MAX_MB`."""


@dataclass(frozen=True)
class StoredCode:
    archive: CodeArchive
    created: bool  # False: the same bytes were stored before


def max_bytes() -> int:
    return int(settings.CODE_MAX_BYTES)


def code_path(digest: str) -> Path:
    """Where the archive with this `sha256:<hex>` digest is kept."""
    if not is_digest(digest):
        raise ValueError(f"{digest!r} is not a sha256:<hex> digest")
    return Path(settings.CODE_DIR) / digest.removeprefix(DIGEST_PREFIX)


def store_code_archive(*, data: IO[bytes], team: Team, user: Any) -> StoredCode:
    """Check and keep an uploaded archive for `team` (the caller checked `user` may).

    Raises:
        CodeArchiveTooLarge: over the limit.
        UnsafeArchive: not a safe .tar.gz/.zip; nothing was stored.
    """
    limit = max_bytes()
    incoming = Path(settings.CODE_DIR) / ".incoming"
    incoming.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = incoming / secrets.token_hex(8)
    try:
        digest, size = _copy_hashing(data, tmp, limit)
        info = scan(tmp, max_unpacked_bytes=EXPANSION_FACTOR * limit)
        final = code_path(digest)
        if final.exists():
            tmp.unlink()
        else:
            os.replace(tmp, final)  # the file first: a row never names a missing file
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    with transaction.atomic():
        archive, created = CodeArchive.objects.get_or_create(
            digest=digest, defaults={"size": size, "format": info.format}
        )
        CodeUpload.objects.get_or_create(
            archive=archive,
            team=team,
            defaults={"uploaded_by": user if getattr(user, "pk", None) else None},
        )
    return StoredCode(archive=archive, created=created)


def _copy_hashing(data: IO[bytes], target: Path, limit: int) -> tuple[str, int]:
    try:
        digest, size = archives.copy_hashing(data, target, limit)
    except archives.TooLarge as exc:
        raise CodeArchiveTooLarge(f"the archive is larger than {limit / 2**20:g} MiB") from exc
    if size == 0:
        raise UnsafeArchive("the archive is empty")
    return digest, size


def usable_by(digest: str, user: Any) -> bool:
    """An archive a team of `user` uploaded (platform admins: any stored archive)."""
    return CodeArchive.objects.visible_to(user).filter(digest=digest).exists()


REQUIREMENTS_FILE = "requirements.txt"


def archive_requirements(digest: str) -> str | None:
    """The text of the archive's top-level `requirements.txt` (at most 64 KiB), or None.

    Raises:
        UnsafeArchive: the file is larger, or the stored archive no longer scans.
    """
    content = read_member(
        code_path(digest),
        REQUIREMENTS_FILE,
        max_unpacked_bytes=EXPANSION_FACTOR * max_bytes(),
        max_bytes=64 * 1024,
    )
    return None if content is None else content.decode("utf-8", "replace")
