"""Users' code archives (`.tar.gz` or `.zip`): safety checks and read-only unpacking.

The control plane scans an upload before it stores it and the agent scans again before it
unpacks, with the same rules: no absolute paths, no `..`, no links pointing outside the
archive, no device files or FIFOs, no duplicate names, and bounded total size and member
count — checked from the archive's headers while reading it, never by extracting it.
Unpacked files are 0444 (0555 when executable) and directories 0555.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

DIGEST_PREFIX = "sha256:"
MAX_MEMBERS = 100_000
MAX_LINK_TARGET_BYTES = 4096
_CHUNK = 1024 * 1024


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


@dataclass(frozen=True, slots=True)
class ArchiveInfo:
    format: str  # "tar.gz" | "zip"
    members: int
    unpacked_bytes: int


def sha256_file(path: Path) -> str:
    """`sha256:<hex>` of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
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
        for chunk in iter(lambda: data.read(_CHUNK), b""):
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
    count = total = 0
    kinds: dict[str, str] = {}
    links: list[Member] = []
    for member in _members(path, fmt):
        count += 1
        if count > max_members:
            raise UnsafeArchive(f"the archive has more than {max_members} members")
        if member.name == "." and member.kind != "dir":
            raise UnsafeArchive("a member of the archive has an empty name")
        total += member.size
        if total > max_unpacked_bytes:
            raise UnsafeArchive(
                f"the archive expands to more than {max_unpacked_bytes} bytes "
                "(10x the upload limit)"
            )
        if member.name in kinds and not (member.kind == kinds[member.name] == "dir"):
            raise UnsafeArchive(f"{member.name!r} appears twice in the archive")
        kinds[member.name] = member.kind
        if member.kind in ("symlink", "hardlink"):
            links.append(member)
    for link in links:
        _check_link(link, kinds)
    for name in kinds:
        parent = posixpath.dirname(name)
        while parent:
            if kinds.get(parent) in ("symlink", "hardlink"):
                raise UnsafeArchive(f"{name!r} lies under the link {parent!r}")
            if kinds.get(parent) == "file":
                raise UnsafeArchive(f"{name!r} lies under the file {parent!r}")
            parent = posixpath.dirname(parent)
    return ArchiveInfo(format=fmt, members=count, unpacked_bytes=total)


def extract(path: Path, dest: Path, *, max_unpacked_bytes: int) -> ArchiveInfo:
    """Scan, then unpack the archive into the new directory `dest`, read-only.

    Links are made last, so nothing is ever written through one. `dest` must not exist.
    """
    info = scan(path, max_unpacked_bytes=max_unpacked_bytes)
    dest.mkdir(mode=0o700)
    dirs = [dest]
    links: list[Member] = []
    with _open(path, info.format) as archive:
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


# -- reading members ---------------------------------------------------------------------


def _members(path: Path, fmt: str) -> Iterator[Member]:
    if fmt == "zip":
        yield from (m for m, _ in _zip_entries(path, read_data=False))
    else:
        yield from _tar_members(path)


def _tar_members(path: Path) -> Iterator[Member]:
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            for info in tar:
                yield _tar_member(info)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UnsafeArchive(f"not a readable .tar.gz archive: {exc}") from None


def _tar_member(info: tarfile.TarInfo) -> Member:
    name = _clean_name(info.name)
    if info.isdir():
        return Member(name, "dir")
    if info.isreg():
        return Member(name, "file", size=info.size, executable=bool(info.mode & 0o111))
    if info.issym():
        return Member(name, "symlink", link=info.linkname)
    if info.islnk():
        return Member(name, "hardlink", link=_clean_name(info.linkname))
    raise UnsafeArchive(f"{info.name!r} is a device file, FIFO or other special file")


def _zip_entries(path: Path, *, read_data: bool) -> Iterator[tuple[Member, IO[bytes] | None]]:
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                mode = info.external_attr >> 16
                name = _clean_name(info.filename)
                if info.is_dir():
                    yield Member(name, "dir"), None
                elif stat.S_ISLNK(mode):
                    if info.file_size > MAX_LINK_TARGET_BYTES:
                        raise UnsafeArchive(f"{info.filename!r}: link target too long")
                    target = archive.read(info).decode("utf-8", errors="replace")
                    yield Member(name, "symlink", link=target), None
                elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                    raise UnsafeArchive(
                        f"{info.filename!r} is a device file, FIFO or other special file"
                    )
                else:
                    member = Member(
                        name, "file", size=info.file_size, executable=bool(mode & 0o111)
                    )
                    if read_data:
                        with archive.open(info) as data:
                            yield member, data
                    else:
                        yield member, None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
        raise UnsafeArchive(f"not a readable .zip archive: {exc}") from None


class _open:
    """Iterate (member, data) pairs of a scanned archive; data is set for files."""

    def __init__(self, path: Path, fmt: str) -> None:
        self._path, self._fmt = path, fmt
        self._tar: tarfile.TarFile | None = None

    def __enter__(self) -> Iterator[tuple[Member, IO[bytes] | None]]:
        if self._fmt == "zip":
            return _zip_entries(self._path, read_data=True)
        self._tar = tarfile.open(self._path, mode="r:gz")
        return self._tar_entries(self._tar)

    @staticmethod
    def _tar_entries(tar: tarfile.TarFile) -> Iterator[tuple[Member, IO[bytes] | None]]:
        for info in tar:
            member = _tar_member(info)
            yield member, tar.extractfile(info) if member.kind == "file" else None

    def __exit__(self, *exc: object) -> None:
        if self._tar is not None:
            self._tar.close()


# -- the checks ----------------------------------------------------------------------------


def _clean_name(raw: str) -> str:
    if not raw or "\x00" in raw or "\\" in raw:
        raise UnsafeArchive(f"member name {raw!r} is empty or holds NUL or '\\'")
    if raw.startswith("/"):
        raise UnsafeArchive(f"{raw!r} is an absolute path")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"{raw!r} contains '..'")
    if not parts:
        return "."
    return "/".join(parts)


def _check_link(link: Member, kinds: dict[str, str]) -> None:
    if link.kind == "hardlink":
        if kinds.get(link.link) != "file":
            raise UnsafeArchive(f"hard link {link.name!r} names {link.link!r}, not a file in it")
        return
    target = link.link
    if not target or target.startswith("/") or "\x00" in target:
        raise UnsafeArchive(f"link {link.name!r} points outside the archive ({target!r})")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link.name), target))
    if resolved == ".." or resolved.startswith("../"):
        raise UnsafeArchive(f"link {link.name!r} points outside the archive ({target!r})")


def _write_file(target: Path, data: IO[bytes], member: Member) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        for chunk in iter(lambda: data.read(_CHUNK), b""):
            out.write(chunk)
    os.chmod(target, 0o555 if member.executable else 0o444)


def _is_exec(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o111)
