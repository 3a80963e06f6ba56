"""Unpacking a scanned archive read-only: files 0444 (0555 when executable), directories
0555, links made last so nothing is ever written through one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .limits import CHUNK
from .members import ArchiveInfo, Entry, Member, UnsafeArchive
from .scanning import scan
from .tars import tar_entries
from .zips import zip_entries


def extract(path: Path, dest: Path, *, max_unpacked_bytes: int) -> ArchiveInfo:
    """Scan, then unpack the archive into the new directory `dest`, read-only.

    Links are made last, so nothing is ever written through one. `dest` must not exist.
    """
    info = scan(path, max_unpacked_bytes=max_unpacked_bytes)
    dest.mkdir(mode=0o700)
    dirs = [dest]
    links: list[Member] = []
    with _open(path, info.format, max_unpacked_bytes) as archive:
        for member, data in archive:
            target = dest / member.name
            if member.kind == "dir":
                target.mkdir(mode=0o700, parents=True, exist_ok=True)
                dirs.append(target)
            elif member.kind == "file":
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                assert data is not None
                _write_file(target, data, member)
            else:
                links.append(member)
    for link in links:
        target = dest / link.name
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if link.kind == "symlink":
            os.symlink(link.link, target)
        else:  # a hard link: a copy of the member it names
            source = dest / link.link
            with source.open("rb") as f:
                _write_file(target, f, Member(link.name, "file", executable=_is_exec(source)))
    for root, subdirs, _files in os.walk(dest):
        dirs.extend(Path(root) / d for d in subdirs if not (Path(root) / d).is_symlink())
    for d in sorted(set(dirs), key=lambda p: len(p.parts), reverse=True):
        os.chmod(d, 0o555)
    return info


def read_member(path: Path, name: str, *, max_unpacked_bytes: int, max_bytes: int) -> bytes | None:
    """The contents of the file `name` (a top-level `requirements.txt`, say) of a scanned
    archive, without unpacking it; None when there is no such file.

    Raises:
        UnsafeArchive: the archive breaks the rules, or the file is over `max_bytes`.
    """
    info = scan(path, max_unpacked_bytes=max_unpacked_bytes)
    with _open(path, info.format, max_unpacked_bytes) as archive:
        for member, data in archive:
            if member.name == name and member.kind == "file" and data is not None:
                content = data.read(max_bytes + 1)
                if len(content) > max_bytes:
                    raise UnsafeArchive(f"{name} is larger than {max_bytes} bytes")
                return content
    return None


def make_writable(root: Path) -> None:
    """Undo `extract`'s read-only modes so the tree can be deleted."""
    if not root.exists():
        return
    os.chmod(root, 0o755)
    for current, subdirs, _files in os.walk(root):
        for d in subdirs:
            p = Path(current) / d
            if not p.is_symlink():
                os.chmod(p, 0o755)


@contextmanager
def _open(path: Path, fmt: str, limit: int) -> Iterator[Iterator[Entry]]:
    """The (member, data) pairs of a scanned archive; data is set for files."""
    entries = zip_entries(path, read_data=True) if fmt == "zip" else tar_entries(path, limit)
    try:
        yield entries
    finally:
        entries.close()


def _write_file(target: Path, data: IO[bytes], member: Member) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        for chunk in iter(lambda: data.read(CHUNK), b""):
            out.write(chunk)
    os.chmod(target, 0o555 if member.executable else 0o444)


def _is_exec(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o111)
