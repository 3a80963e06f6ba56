"""`ps_runtime.archives` under hostile archives: reading is bounded (huge pax and long-name
headers, a tar stream longer than the limit, a zip directory too large or too long),
links are resolved through each other, and numbers are ASCII."""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from ps_runtime import archives
from ps_runtime.archives import UnsafeArchive

from ..archive_builders import member, tar_gz, zip_bytes

MiB = 1024 * 1024
# What the server allows by default: 10x a 100 MiB upload.
SERVER_LIMIT = 1000 * MiB


def _block(data: bytes) -> bytes:
    return data + bytes(-len(data) % tarfile.BLOCKSIZE)


def _header(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.GNU_FORMAT)


def headed_tar(path: Path, kind: bytes, header_size: int) -> Path:
    """A .tar.gz of one empty `a.py` after a pax (`x`) or GNU long-name (`L`) header of
    `header_size` bytes of one repeated byte, written in pieces (never all in memory)."""
    prefix = b""
    if kind == tarfile.XHDTYPE:  # one record: "<length> comment=aaa…\n"
        prefix = f"{header_size} comment=".encode()
    with gzip.open(path, "wb", compresslevel=6) as out:
        out.write(_header("././@Header", kind, header_size))
        out.write(prefix)
        left = header_size - len(prefix) - 1
        while left:
            out.write(b"a" * min(left, MiB))
            left -= min(left, MiB)
        out.write(b"\n" + bytes(-header_size % tarfile.BLOCKSIZE))
        out.write(_header("a.py", tarfile.REGTYPE, 0))
        out.write(bytes(2 * tarfile.BLOCKSIZE))
    return path


def peak_bytes(action: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        action()
    finally:
        _size, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME])
def test_a_huge_header_is_refused_in_little_memory(tmp_path: Path, kind: bytes) -> None:
    path = headed_tar(tmp_path / "headers.tar.gz", kind, 200 * MiB)
    assert path.stat().st_size < 1 * MiB  # a small upload...
    refusal: list[Exception] = []

    def scan() -> None:
        with pytest.raises(UnsafeArchive, match=r"tar headers .* take more than") as caught:
            archives.scan(path, max_unpacked_bytes=SERVER_LIMIT)
        refusal.append(caught.value)

    peak = peak_bytes(scan)  # ...that does not make the check hold 200 MiB
    assert refusal, "the archive was accepted"
    assert peak < 64 * MiB, f"scanning took {peak / MiB:.0f} MiB"
    with pytest.raises(UnsafeArchive):
        archives.extract(path, tmp_path / "out", max_unpacked_bytes=SERVER_LIMIT)
    assert not (tmp_path / "out").exists()


def test_headers_count_against_the_unpacked_size(tmp_path: Path) -> None:
    # Members of no size at all, behind 600 KiB of pax header: 600 KiB to unpack.
    path = headed_tar(tmp_path / "pax.tar.gz", tarfile.XHDTYPE, 600 * 1024)
    assert archives.scan(path, max_unpacked_bytes=SERVER_LIMIT).unpacked_bytes == 0
    with pytest.raises(UnsafeArchive, match="expands to more than 100000 bytes"):
        archives.scan(path, max_unpacked_bytes=100_000)


def test_a_long_run_of_small_headers_counts_too(tmp_path: Path) -> None:
    extra = [member(f"d{i:04d}/" + "x" * 200, tarfile.DIRTYPE) for i in range(2000)]
    path = tmp_path / "dirs.tar.gz"
    path.write_bytes(tar_gz(extra=extra))
    archives.scan(path, max_unpacked_bytes=SERVER_LIMIT)
    with pytest.raises(UnsafeArchive, match="expands to more than 200000 bytes"):
        archives.scan(path, max_unpacked_bytes=200_000)


# -- zip central directories -------------------------------------------------------------

_ENTRY = struct.Struct("<4s4B4HL2L5H2L")
_END = struct.Struct("<4s4H2LH")


def directory_only_zip(names: list[bytes], comment: bytes = b"") -> bytes:
    """A zip of one local header and a central directory: all `zipfile` reads to list
    the members."""
    entries = b"".join(
        _ENTRY.pack(
            b"PK\x01\x02",
            *(20, 3, 20, 0),  # made by / needs version 2.0, on Unix
            *(0, 0, 0, 0x21),  # flags, stored, time, date
            *(0, 0, 0),  # CRC, sizes
            *(len(name), 0, len(comment), 0, 0),  # name, extra, comment; disk, attrs
            0o100644 << 16,  # a regular file
            0,  # the local header's offset
        )
        + name
        + comment
        for name in names
    )
    # The first member's local header, so that the file starts as a zip does.
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0x21, 0, 0, 0, len(names[0]), 0)
    local += names[0]
    count = min(len(names), 0xFFFF)
    end = _END.pack(b"PK\x05\x06", 0, 0, count, count, len(entries), len(local), 0)
    return local + entries + end


def test_a_zip_listing_too_many_members_is_refused_before_it_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "many.zip"
    path.write_bytes(directory_only_zip([b"m%06d.py" % i for i in range(250_000)]))
    assert path.stat().st_size < 16 * MiB
    refusal: list[Exception] = []

    def scan() -> None:
        with pytest.raises(UnsafeArchive, match="more than 100000 members") as caught:
            archives.scan(path, max_unpacked_bytes=SERVER_LIMIT)
        refusal.append(caught.value)

    peak = peak_bytes(scan)
    assert refusal
    assert peak < 32 * MiB, f"scanning took {peak / MiB:.0f} MiB"


def test_a_zip_with_an_oversized_central_directory_is_refused(tmp_path: Path) -> None:
    # 520 members, each with a 64 KiB comment: a 33 MiB directory.
    path = tmp_path / "fat.zip"
    path.write_bytes(directory_only_zip([b"m%03d.py" % i for i in range(520)], b"c" * 65_000))
    with pytest.raises(UnsafeArchive, match=r"central directory takes .* bytes, more than"):
        archives.scan(path, max_unpacked_bytes=SERVER_LIMIT)


def test_an_ordinary_zip_still_passes_the_directory_check(tmp_path: Path) -> None:
    path = tmp_path / "ok.zip"
    path.write_bytes(zip_bytes({f"pkg/m{i}.py": b"X = 1\n" for i in range(50)}))
    assert archives.scan(path, max_unpacked_bytes=SERVER_LIMIT).members == 50
    with pytest.raises(UnsafeArchive, match="lists more than 10 members"):
        archives.scan(path, max_unpacked_bytes=SERVER_LIMIT, max_members=10)


# -- links ---------------------------------------------------------------------------------


def links_tar(links: dict[str, str], files: dict[str, bytes] | None = None) -> bytes:
    return tar_gz(files, extra=[member(n, tarfile.SYMTYPE, t) for n, t in links.items()])


@pytest.mark.parametrize(
    "links",
    [
        # Each target alone stays inside; followed through the links before it, the last
        # one is the root's parent.
        {"a": ".", "b": "a/..", "c": "b/etc/passwd"},
        {"a": ".", "b": "a/.."},
        {"d/a": "..", "d/b": "a/.."},
        {"a": "d/e/../..", "d": ".", "x": "a/a/.."},
        # A loop never resolves.
        {"a": "b", "b": "a"},
        {"a": "a/x"},
    ],
)
def test_a_chain_of_links_that_leaves_the_root_is_refused(
    tmp_path: Path, links: dict[str, str]
) -> None:
    path = tmp_path / "links.tar.gz"
    path.write_bytes(links_tar(links))
    with pytest.raises(UnsafeArchive, match=r"points outside|more than 40 links"):
        archives.scan(path, max_unpacked_bytes=SERVER_LIMIT)
    with pytest.raises(UnsafeArchive):
        archives.extract(path, tmp_path / "out", max_unpacked_bytes=SERVER_LIMIT)
    assert not (tmp_path / "out").exists()


def test_chains_of_links_that_stay_inside_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "links.tar.gz"
    links = {"a": ".", "b": "a/pkg", "pkg/up": "../b/../a", "c": "b/../pkg/real.py"}
    path.write_bytes(links_tar(links, {"pkg/real.py": b"A = 2\n"}))
    out = tmp_path / "out"
    archives.extract(path, out, max_unpacked_bytes=SERVER_LIMIT)
    assert (out / "c").read_bytes() == b"A = 2\n"
    assert (out / "pkg" / "up").resolve() == out.resolve()
    archives.make_writable(out)


def test_a_zip_chain_of_links_is_resolved_too(tmp_path: Path) -> None:
    path = tmp_path / "links.zip"
    path.write_bytes(zip_bytes({"a.py": b""}, symlinks={"a": ".", "b": "a/.."}))
    with pytest.raises(UnsafeArchive, match="link 'b' points outside"):
        archives.scan(path, max_unpacked_bytes=SERVER_LIMIT)


# -- numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize("digits", ["\u0662", "\uff12", "\u00b2"])
def test_pax_numbers_must_be_ascii_digits(tmp_path: Path, digits: str) -> None:
    info = tarfile.TarInfo("a.py")
    info.size = 2
    info.pax_headers = {"size": digits}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(b"hi"))
    path = tmp_path / "pax.tar.gz"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(UnsafeArchive, match="pax field 'size' is not a number"):
        archives.scan(path, max_unpacked_bytes=SERVER_LIMIT)


def sparse_tar(count: bytes) -> bytes:
    """A GNU sparse 1.0 member whose map starts with `count` (tarfile parses it)."""
    info = tarfile.TarInfo("GNUSparseFile.0/a.py")
    info.size = tarfile.BLOCKSIZE
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": "a.py",
        "GNU.sparse.realsize": "1",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(_block(count + b"\n")))
    return buffer.getvalue()


@pytest.mark.parametrize("count", ["\u0661".encode(), b"1"])
def test_a_malformed_sparse_map_is_an_unsafe_archive_not_a_crash(
    tmp_path: Path, count: bytes
) -> None:
    # An Arabic-Indic one: int() refuses the bytes; "1" with nothing after it: the map
    # ends early.
    path = tmp_path / "sparse.tar.gz"
    path.write_bytes(sparse_tar(count))
    with pytest.raises(UnsafeArchive, match=r"not a readable .tar.gz"):
        archives.scan(path, max_unpacked_bytes=SERVER_LIMIT)
