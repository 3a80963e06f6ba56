"""Reading a `.zip` within bounds: its central directory is measured before `zipfile`
loads it."""

from __future__ import annotations

import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Generator
from pathlib import Path

from .limits import MAX_LINK_TARGET_BYTES, MAX_ZIP_DIRECTORY_BYTES
from .members import Entry, Member, UnsafeArchive, clean_name

# The zip records `zipfile` reads to find the central directory (APPNOTE 4.3.12-16).
_ZIP_END = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_END = struct.Struct("<4sQ2H2L4Q")
_ZIP_ENTRY = struct.Struct("<4s4B4HL2L5H2L")


def check_zip_directory(path: Path, max_members: int) -> None:
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


def zip_entries(path: Path, *, read_data: bool) -> Generator[Entry, None, None]:
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                mode = info.external_attr >> 16
                name = clean_name(info.filename)
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
