"""Reading a `.tar.gz` within bounds: its decompressed stream, headers included, counts
against the unpacked-size limit, and one member's headers are capped at `MAX_HEADER_BYTES`."""

from __future__ import annotations

import gzip
import os
import re
import tarfile
from collections.abc import Generator, Iterator
from pathlib import Path

from .limits import MAX_GLOBAL_PAX_BYTES, MAX_HEADER_BYTES, MAX_LINK_TARGET_BYTES
from .members import Entry, Member, UnsafeArchive, clean_name, too_large


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
            raise too_large(self._limit)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence not in (os.SEEK_SET, os.SEEK_CUR):
            raise OSError("a tar stream seeks only from its start or its position")
        target = offset if whence == os.SEEK_SET else self._pos + offset
        if target > self._limit:
            raise too_large(self._limit)
        self._pos = self._raw.seek(target)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True


def tar_infos(path: Path, limit: int) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
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


def tar_member(info: tarfile.TarInfo) -> Member:
    for field in _PAX_NUMBER_FIELDS:
        value = info.pax_headers.get(field)
        if value is not None and not _PAX_NUMBER.fullmatch(value):
            raise UnsafeArchive(f"{info.name!r}: pax field {field!r} is not a number")
    name = clean_name(info.name)
    if info.isdir():
        return Member(name, "dir")
    if info.isreg():
        return Member(name, "file", size=info.size, executable=bool(info.mode & 0o111))
    if len(info.linkname.encode("utf-8", "surrogateescape")) > MAX_LINK_TARGET_BYTES:
        raise UnsafeArchive(f"{info.name!r}: link target too long")
    if info.issym():
        return Member(name, "symlink", link=info.linkname)
    if info.islnk():
        return Member(name, "hardlink", link=clean_name(info.linkname))
    raise UnsafeArchive(f"{info.name!r} is a device file, FIFO or other special file")


def tar_entries(path: Path, limit: int) -> Generator[Entry, None, None]:
    for tar, info in tar_infos(path, limit):
        member = tar_member(info)
        yield member, tar.extractfile(info) if member.kind == "file" else None
