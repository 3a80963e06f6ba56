"""Scanning an archive from its headers, without extracting anything: names, kinds,
duplicates, total size and member count, and where its links lead."""

from __future__ import annotations

import posixpath
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from .limits import MAX_MEMBERS, MAX_NAMES_BYTES
from .links import check_links
from .members import ArchiveInfo, Member, UnsafeArchive, too_large
from .tars import tar_infos, tar_member
from .zips import check_zip_directory, zip_entries


def archive_format(path: Path) -> str:
    """ "tar.gz" or "zip", by the file's first bytes."""
    with path.open("rb") as f:
        head = f.read(4)
    if head[:2] == b"\x1f\x8b":
        return "tar.gz"
    if head in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    raise UnsafeArchive("not a .tar.gz or .zip archive")


def scan(path: Path, *, max_unpacked_bytes: int, max_members: int = MAX_MEMBERS) -> ArchiveInfo:
    """Check every member of the archive at `path` without extracting anything.

    Raises:
        UnsafeArchive: naming the first offending member, or the limit passed.
    """
    fmt = archive_format(path)
    count = total = names = 0
    kinds: dict[str, str] = {}
    links: list[Member] = []
    for member in _members(path, fmt, max_unpacked_bytes, max_members):
        count += 1
        if count > max_members:
            raise UnsafeArchive(f"the archive has more than {max_members} members")
        if member.name == "." and member.kind != "dir":
            raise UnsafeArchive("a member of the archive has an empty name")
        total += member.size
        if total > max_unpacked_bytes:
            raise too_large(max_unpacked_bytes)
        names += len(member.name) + len(member.link)
        if names > MAX_NAMES_BYTES:
            raise UnsafeArchive(
                f"the archive's member names take more than {MAX_NAMES_BYTES} bytes"
            )
        if member.name in kinds and not (member.kind == kinds[member.name] == "dir"):
            raise UnsafeArchive(f"{member.name!r} appears twice in the archive")
        kinds[member.name] = member.kind
        if member.kind in ("symlink", "hardlink"):
            links.append(member)
    for name in kinds:
        parent = posixpath.dirname(name)
        while parent:
            if kinds.get(parent) in ("symlink", "hardlink"):
                raise UnsafeArchive(f"{name!r} lies under the link {parent!r}")
            if kinds.get(parent) == "file":
                raise UnsafeArchive(f"{name!r} lies under the file {parent!r}")
            parent = posixpath.dirname(parent)
    check_links(links, kinds)
    return ArchiveInfo(format=fmt, members=count, unpacked_bytes=total)


def _members(path: Path, fmt: str, limit: int, max_members: int) -> Iterator[Member]:
    if fmt == "zip":
        check_zip_directory(path, max_members)
        yield from (m for m, _ in zip_entries(path, read_data=False))
    else:
        try:
            for _tar, info in tar_infos(path, limit):
                yield tar_member(info)
        except UnsafeArchive:
            raise
        # tarfile lets some malformed headers out as ValueError (a sparse map that ends
        # early, a count that is not a number), and a corrupt stream as zlib.error.
        except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as exc:
            raise UnsafeArchive(f"not a readable .tar.gz archive: {exc}") from None
