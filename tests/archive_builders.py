"""Archives for tests: good ones, and each kind the checks must refuse."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile

MYMODEL = b'''"""A user's model that exists only in its code archive: the coordinator runs
`train`, the workers import `square` from the same archive."""

import ps_runtime
from ps_runtime.coordinator.cluster import ClusterResolver
from ps_runtime.coordinator.cluster_coordinator import ClusterCoordinator
from ps_runtime.coordinator.strategy import ParameterServerStrategy


def square(x: int) -> int:
    return x * x


def train(steps: int = 3) -> dict[str, int]:
    strategy = ParameterServerStrategy(ClusterResolver())
    coordinator = ClusterCoordinator(strategy)
    try:
        values = [coordinator.schedule(square, (step,)) for step in range(steps)]
        coordinator.join()
        for step, value in enumerate(values):
            ps_runtime.report(step=step, user_code_square=float(value.fetch()))
    finally:
        coordinator.shutdown()
        strategy.close()
    return {"steps": steps}
'''


def tar_gz(
    files: dict[str, bytes] | None = None, *, extra: list[tarfile.TarInfo] | None = None
) -> bytes:
    """A .tar.gz of `files` (name -> bytes) and raw `extra` members (no data)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (files or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tar.addfile(info)
    return buffer.getvalue()


def member(name: str, kind: bytes, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def zip_bytes(files: dict[str, bytes], *, symlinks: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


def traversal_tar() -> bytes:
    return tar_gz({"../evil.py": b"print('escaped')\n"})


def unsafe_archives() -> dict[str, bytes]:
    """One archive per kind of refusal, by a short name."""
    return {
        "absolute": tar_gz({"/etc/evil.py": b"x"}),
        "traversal": traversal_tar(),
        "nested-traversal": tar_gz({"pkg/../../evil.py": b"x"}),
        "symlink-outside": tar_gz(extra=[member("link", tarfile.SYMTYPE, "../../etc/passwd")]),
        "symlink-absolute": tar_gz(extra=[member("link", tarfile.SYMTYPE, "/etc/passwd")]),
        "hardlink-outside": tar_gz(extra=[member("link", tarfile.LNKTYPE, "../etc/passwd")]),
        "device": tar_gz(extra=[member("dev", tarfile.CHRTYPE)]),
        "fifo": tar_gz(extra=[member("pipe", tarfile.FIFOTYPE)]),
        "under-link": tar_gz(
            {"lib/x.py": b"x"}, extra=[member("lib", tarfile.SYMTYPE, "elsewhere")]
        ),
        "zip-traversal": zip_bytes({"../evil.py": b"x"}),
        "zip-symlink-outside": zip_bytes({"a.py": b""}, symlinks={"link": "../../x"}),
        "not-an-archive": b"just some text, neither gzip nor zip\n",
    }
