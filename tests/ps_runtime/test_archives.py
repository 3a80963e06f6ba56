"""`ps_runtime.archives`: what the server and the agent accept, and how it is unpacked."""

from __future__ import annotations

import stat
import tarfile
from pathlib import Path

import pytest

from ps_runtime import archives
from ps_runtime.archives import UnsafeArchive

from ..archive_builders import MYMODEL, member, tar_gz, unsafe_archives, zip_bytes

LIMIT = 10 * 1024 * 1024


def write(tmp_path: Path, data: bytes, name: str = "a") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
def test_a_good_archive_unpacks_read_only(tmp_path: Path, kind: str) -> None:
    files = {"mymodel.py": MYMODEL, "pkg/__init__.py": b"", "pkg/util.py": b"X = 1\n"}
    data = tar_gz(files) if kind == "tar.gz" else zip_bytes(files)
    path = write(tmp_path, data)
    info = archives.extract(path, tmp_path / "out", max_unpacked_bytes=LIMIT)
    assert info.format == kind
    assert (tmp_path / "out" / "pkg" / "util.py").read_bytes() == b"X = 1\n"
    assert stat.S_IMODE((tmp_path / "out" / "mymodel.py").stat().st_mode) == 0o444
    assert stat.S_IMODE((tmp_path / "out" / "pkg").stat().st_mode) == 0o555
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o555
    archives.make_writable(tmp_path / "out")


def test_links_inside_the_archive_are_kept(tmp_path: Path) -> None:
    data = tar_gz(
        {"pkg/real.py": b"A = 2\n"},
        extra=[
            member("alias.py", tarfile.SYMTYPE, "pkg/real.py"),
            member("pkg/up.py", tarfile.SYMTYPE, "../alias.py"),
            member("copy.py", tarfile.LNKTYPE, "pkg/real.py"),
        ],
    )
    out = tmp_path / "out"
    archives.extract(write(tmp_path, data), out, max_unpacked_bytes=LIMIT)
    assert (out / "alias.py").is_symlink()
    assert (out / "pkg" / "up.py").read_bytes() == b"A = 2\n"
    assert (out / "copy.py").read_bytes() == b"A = 2\n"


@pytest.mark.parametrize("name", sorted(unsafe_archives()))
def test_unsafe_archives_are_refused_before_anything_is_written(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, unsafe_archives()[name])
    with pytest.raises(UnsafeArchive):
        archives.scan(path, max_unpacked_bytes=LIMIT)
    with pytest.raises(UnsafeArchive):
        archives.extract(path, tmp_path / "out", max_unpacked_bytes=LIMIT)
    assert not (tmp_path / "out").exists()
    assert not (tmp_path.parent / "evil.py").exists()


def test_the_unpacked_size_and_member_count_are_bounded(tmp_path: Path) -> None:
    bomb = write(tmp_path, tar_gz({"zeros.bin": bytes(200_000)}))
    assert bomb.stat().st_size < 2_000
    with pytest.raises(UnsafeArchive, match="expands to more than 100000 bytes"):
        archives.scan(bomb, max_unpacked_bytes=100_000)
    many = write(tmp_path, tar_gz({f"m{i}.py": b"" for i in range(20)}), "many")
    with pytest.raises(UnsafeArchive, match="more than 10 members"):
        archives.scan(many, max_unpacked_bytes=LIMIT, max_members=10)


def test_messages_name_the_offending_member(tmp_path: Path) -> None:
    cases = unsafe_archives()
    for name, fragment in [
        ("traversal", "contains '..'"),
        ("absolute", "absolute path"),
        ("symlink-outside", "points outside"),
        ("device", "device file"),
    ]:
        with pytest.raises(UnsafeArchive, match=fragment):
            archives.scan(write(tmp_path, cases[name], name), max_unpacked_bytes=LIMIT)


def test_digests(tmp_path: Path) -> None:
    path = write(tmp_path, b"abc")
    digest = archives.sha256_file(path)
    assert digest == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert archives.is_digest(digest)
    assert not archives.is_digest("sha256:ABC")
    assert not archives.is_digest(digest.upper())
