"""Users' code archives (`.tar.gz` or `.zip`): safety checks and read-only unpacking.

The control plane scans an upload before it stores it and the agent scans again before it
unpacks, with the same rules: no absolute paths, no `..`, no links pointing outside the
archive, no device files or FIFOs, no duplicate names, and bounded total size and member
count — checked from the archive's headers while reading it, never by extracting it.
Reading is bounded too: a tar's decompressed stream, its headers included, counts against
the unpacked-size limit, one member's headers (pax, GNU long names) are capped at
`MAX_HEADER_BYTES`, and a zip's central directory is measured before it is read.
Symlinks are resolved component by component, through the archive's other links.
Unpacked files are 0444 (0555 when executable) and directories 0555.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import posixpath
import re
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

DIGEST_PREFIX = "sha256:"
MAX_MEMBERS = 100_000
MAX_NAME_BYTES = 4096  # PATH_MAX: a longer name could not be unpacked anyway
MAX_LINK_TARGET_BYTES = 4096
# All member names and link targets together (a real tree of 100,000 files needs ~10 MiB).
MAX_NAMES_BYTES = 32 * 1024 * 1024
# The headers read before one tar member (pax, GNU long name/link, sparse maps).
MAX_HEADER_BYTES = 1024 * 1024
# A tar's global pax headers (`git archive` writes one, of 52 bytes).
MAX_GLOBAL_PAX_BYTES = 64 * 1024
MAX_ZIP_DIRECTORY_BYTES = 32 * 1024 * 1024
MAX_LINK_DEPTH = 40  # links followed while resolving one link (Linux's MAXSYMLINKS)
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


_Entry = tuple[Member, IO[bytes] | None]


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
            raise _too_large(max_unpacked_bytes)
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
    _check_links(links, kinds)
    return ArchiveInfo(format=fmt, members=count, unpacked_bytes=total)


def _too_large(limit: int) -> UnsafeArchive:
    return UnsafeArchive(f"the archive expands to more than {limit} bytes (10x the upload limit)")


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


def _members(path: Path, fmt: str, limit: int, max_members: int) -> Iterator[Member]:
    if fmt == "zip":
        _check_zip_directory(path, max_members)
        yield from (m for m, _ in _zip_entries(path, read_data=False))
    else:
        try:
            for _tar, info in _tar_infos(path, limit):
                yield _tar_member(info)
        except UnsafeArchive:
            raise
        # tarfile lets some malformed headers out as ValueError (a sparse map that ends
        # early, a count that is not a number), and a corrupt stream as zlib.error.
        except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as exc:
            raise UnsafeArchive(f"not a readable .tar.gz archive: {exc}") from None


class _TarStream:
    """A tar's decompressed stream that refuses to go past `limit` bytes in all, or past
    `MAX_HEADER_BYTES` of headers before one member, before it reads them."""

    def __init__(self, raw: gzip.GzipFile, limit: int) -> None:
        self._raw, self._limit = raw, limit
        self._pos = 0
        self._header_bytes: int | None = 0  # None: reading a member's data

    def begin_headers(self) -> None:
        self._header_bytes = 0

    def end_headers(self) -> None:
        self._header_bytes = None

    def read(self, size: int | None = -1) -> bytes:
        allowed = self._limit - self._pos + 1  # one byte over says "too large"
        if size is None or size < 0 or size > allowed:
            size = allowed
        if self._header_bytes is not None:
            self._header_bytes += size
            if self._header_bytes > MAX_HEADER_BYTES:
                raise UnsafeArchive(
                    f"a member's tar headers (pax or long-name) take more than "
                    f"{MAX_HEADER_BYTES} bytes"
                )
        data = self._raw.read(size)
        self._pos += len(data)
        if self._pos > self._limit:
            raise _too_large(self._limit)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence not in (os.SEEK_SET, os.SEEK_CUR):
            raise OSError("a tar stream seeks only from its start or its position")
        target = offset if whence == os.SEEK_SET else self._pos + offset
        if target > self._limit:
            raise _too_large(self._limit)
        self._pos = self._raw.seek(target)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True


def _tar_infos(path: Path, limit: int) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    """The members of the .tar.gz at `path`, read within the stream's bounds."""
    with gzip.open(path, "rb") as raw:
        stream = _TarStream(raw, limit)
        # typeshed asks any fileobj for write() and close(); reading needs neither.
        with tarfile.open(fileobj=stream, mode="r:") as tar:  # type: ignore[call-overload]
            while True:
                stream.begin_headers()
                info = tar.next()
                stream.end_headers()
                if info is None:
                    return
                # tarfile keeps every member it read; we need none of them later.
                tar.members.clear()
                if sum(len(k) + len(v) for k, v in tar.pax_headers.items()) > (
                    MAX_GLOBAL_PAX_BYTES
                ):
                    raise UnsafeArchive(
                        f"the archive's global pax headers take more than "
                        f"{MAX_GLOBAL_PAX_BYTES} bytes"
                    )
                yield tar, info


# pax fields tarfile reads as numbers; Python's int() and float() also take non-ASCII
# digits (Arabic-Indic, fullwidth), which other tar readers do not.
_PAX_NUMBER_FIELDS = ("size", "uid", "gid", "mtime", "atime", "ctime")
_PAX_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]*)?", re.ASCII)


def _tar_member(info: tarfile.TarInfo) -> Member:
    for field in _PAX_NUMBER_FIELDS:
        value = info.pax_headers.get(field)
        if value is not None and not _PAX_NUMBER.fullmatch(value):
            raise UnsafeArchive(f"{info.name!r}: pax field {field!r} is not a number")
    name = _clean_name(info.name)
    if info.isdir():
        return Member(name, "dir")
    if info.isreg():
        return Member(name, "file", size=info.size, executable=bool(info.mode & 0o111))
    if len(info.linkname.encode("utf-8", "surrogateescape")) > MAX_LINK_TARGET_BYTES:
        raise UnsafeArchive(f"{info.name!r}: link target too long")
    if info.issym():
        return Member(name, "symlink", link=info.linkname)
    if info.islnk():
        return Member(name, "hardlink", link=_clean_name(info.linkname))
    raise UnsafeArchive(f"{info.name!r} is a device file, FIFO or other special file")


# The zip records `zipfile` reads to find the central directory (APPNOTE 4.3.12-16).
_ZIP_END = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_END = struct.Struct("<4sQ2H2L4Q")
_ZIP_ENTRY = struct.Struct("<4s4B4HL2L5H2L")


def _check_zip_directory(path: Path, max_members: int) -> None:
    """Refuse a zip whose central directory is larger than `MAX_ZIP_DIRECTORY_BYTES` or
    lists more than `max_members` entries, before `zipfile` loads it all into memory.

    It finds the directory where `zipfile` does; a file it cannot make sense of is left
    to `zipfile` to refuse.
    """
    with path.open("rb") as f:
        file_size = f.seek(0, os.SEEK_END)
        tail_start = max(file_size - _ZIP_END.size - 0xFFFF, 0)
        f.seek(tail_start)
        tail = f.read()
        at = len(tail) - _ZIP_END.size
        if not (at >= 0 and tail[at : at + 4] == b"PK\x05\x06" and tail[-2:] == b"\0\0"):
            at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < _ZIP_END.size:
            return
        end = _ZIP_END.unpack_from(tail, at)
        directory_size, directory_end = end[5], tail_start + at
        locator_at = directory_end - _ZIP64_LOCATOR.size
        if locator_at >= 0:
            f.seek(locator_at)
            locator = f.read(_ZIP64_LOCATOR.size)
            if locator[:4] == b"PK\x06\x07":
                record_at = locator_at - _ZIP64_END.size
                if record_at < 0:
                    return
                f.seek(record_at)
                record = f.read(_ZIP64_END.size)
                if record[:4] == b"PK\x06\x06":
                    directory_size, directory_end = _ZIP64_END.unpack(record)[8], record_at
        if directory_size > MAX_ZIP_DIRECTORY_BYTES:
            raise UnsafeArchive(
                f"the zip's central directory takes {directory_size} bytes, more than "
                f"{MAX_ZIP_DIRECTORY_BYTES}"
            )
        if directory_end - directory_size < 0:
            return
        f.seek(directory_end - directory_size)
        directory = f.read(directory_size)
    pos = count = 0
    while pos < directory_size:
        if len(directory) - pos < _ZIP_ENTRY.size or directory[pos : pos + 4] != b"PK\x01\x02":
            return  # truncated or corrupt: zipfile says so
        count += 1
        if count > max_members:
            raise UnsafeArchive(
                f"the zip's central directory lists more than {max_members} members"
            )
        entry = _ZIP_ENTRY.unpack_from(directory, pos)
        pos += _ZIP_ENTRY.size + entry[12] + entry[13] + entry[14]


def _zip_entries(path: Path, *, read_data: bool) -> Generator[_Entry, None, None]:
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
                    # read(n), not archive.read(): n bounds what is decompressed at once.
                    with archive.open(info) as data:
                        raw = data.read(MAX_LINK_TARGET_BYTES + 1)
                    target = raw.decode("utf-8", errors="replace")
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
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error) as exc:
        raise UnsafeArchive(f"not a readable .zip archive: {exc}") from None


@contextmanager
def _open(path: Path, fmt: str, limit: int) -> Iterator[Iterator[_Entry]]:
    """The (member, data) pairs of a scanned archive; data is set for files."""
    entries = _zip_entries(path, read_data=True) if fmt == "zip" else _tar_entries(path, limit)
    try:
        yield entries
    finally:
        entries.close()


def _tar_entries(path: Path, limit: int) -> Generator[_Entry, None, None]:
    for tar, info in _tar_infos(path, limit):
        member = _tar_member(info)
        yield member, tar.extractfile(info) if member.kind == "file" else None


# -- the checks ----------------------------------------------------------------------------


def _clean_name(raw: str) -> str:
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


def _check_links(links: list[Member], kinds: dict[str, str]) -> None:
    symlinks = {link.name: link.link for link in links if link.kind == "symlink"}
    resolved: dict[str, list[str]] = {}
    for link in links:
        if link.kind == "hardlink":
            if kinds.get(link.link) != "file":
                raise UnsafeArchive(
                    f"hard link {link.name!r} names {link.link!r}, not a file in it"
                )
        else:
            _resolve_link(link.name, symlinks, resolved, depth=0)


def _resolve_link(
    name: str, symlinks: dict[str, str], resolved: dict[str, list[str]], depth: int
) -> list[str]:
    """Where the symlink `name` leads, as path components under the archive's root.

    Each component of its target is looked up in turn, and a component that is another
    link of the archive is replaced by where that link leads, as the kernel will do once
    the links are on disk: `a -> .` then `b -> a/..` leaves the root although `a/..`
    alone does not.

    Raises:
        UnsafeArchive: the link (or one it goes through) leads outside the root, or links
            nest deeper than `MAX_LINK_DEPTH` (a loop does).
    """
    if name in resolved:
        return resolved[name]
    target = symlinks[name]
    if depth > MAX_LINK_DEPTH:
        raise UnsafeArchive(
            f"link {name!r} goes through more than {MAX_LINK_DEPTH} links (or a loop)"
        )
    outside = UnsafeArchive(f"link {name!r} points outside the archive ({target!r})")
    if not target or target.startswith("/") or "\x00" in target:
        raise outside
    path = name.split("/")[:-1]
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not path:
                raise outside
            path.pop()
            continue
        path.append(part)
        through = "/".join(path)
        if through in symlinks:
            path = list(_resolve_link(through, symlinks, resolved, depth + 1))
    resolved[name] = path
    return path


def _write_file(target: Path, data: IO[bytes], member: Member) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        for chunk in iter(lambda: data.read(_CHUNK), b""):
            out.write(chunk)
    os.chmod(target, 0o555 if member.executable else 0o444)


def _is_exec(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o111)
