"""The `trainhub-runtime` wheel that `/agent/dist/` serves to nodes (docs/design.md §1).

Nodes install the runtime this server runs, no Django. Two ways to have it:
- a source tree (a checkout, `make install`): the wheel is built from it on first request
  into `AGENT_DIST_DIR` and rebuilt when a source file is newer than the wheel;
- an installed server (the image): no source at run time, so the image builds the wheel
  into `AGENT_DIST_DIR` (`pip wheel --no-deps -w …`, see deploy/Dockerfile).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The runtime's version and where its source tree is: one answer for the agent and server.
from ps_runtime.version import DIST_NAME, runtime_version, source_root

__all__ = [
    "DIST_NAME",
    "WheelUnavailable",
    "runtime_version",
    "runtime_wheel",
    "source_root",
    "wheel_name",
    "wheel_sha256",
]

BUILD_TIMEOUT_SECONDS = 300
_SOURCE_FILES = ("pyproject.toml", "README.md")
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")


class WheelUnavailable(Exception):
    """The wheel is not there and cannot be built here; the message says what to do."""


def wheel_name(version: str | None = None) -> str:
    """`trainhub_runtime-<version>-py3-none-any.whl` (pure Python: one wheel for all nodes)."""
    return f"{DIST_NAME.replace('-', '_')}-{version or runtime_version()}-py3-none-any.whl"


def wheel_sha256(path: Path) -> str:
    """The wheel's sha256 (hex), which /agent/install.sh carries and checks the download
    against; hashed once per version of the file (its size and modification time)."""
    st = path.stat()
    return _sha256(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def runtime_wheel(dist_dir: Path) -> Path:
    """The wheel file for this server's runtime, built first when needed.

    Raises:
        WheelUnavailable: no prebuilt wheel and no source tree, or the build failed.
    """
    root = source_root()
    path = dist_dir / wheel_name()
    if root is None:
        if path.is_file():
            return path
        raise WheelUnavailable(
            f"the agent wheel {path} is missing and this server has no source tree to build "
            f"it from; build it where the source is (`pip wheel --no-deps -w {dist_dir} .` in "
            "the repository root, as deploy/Dockerfile does) or set TRAINHUB_AGENT_DIST_DIR"
        )
    if _is_fresh(path, root):
        return path
    with _build_lock(dist_dir):
        if not _is_fresh(path, root):  # another process may have built it meanwhile
            _build(root, dist_dir, path)
    return path


def _newest_source_mtime(root: Path) -> float:
    files = [root / name for name in _SOURCE_FILES if (root / name).is_file()]
    files += [p for p in (root / "ps_runtime").rglob("*") if "__pycache__" not in p.parts]
    return max(p.stat().st_mtime for p in files if p.is_file())


def _is_fresh(path: Path, root: Path) -> bool:
    return path.is_file() and path.stat().st_mtime >= _newest_source_mtime(root)


@contextmanager
def _build_lock(dist_dir: Path) -> Iterator[None]:
    """One build at a time across this server's processes."""
    try:
        dist_dir.mkdir(parents=True, exist_ok=True)
        lock = (dist_dir / ".build.lock").open("w")
    except OSError as exc:
        raise WheelUnavailable(f"cannot write the agent wheel to {dist_dir}: {exc}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(root: Path, dist_dir: Path, path: Path) -> None:
    """`pip wheel --no-deps` on a copy of the runtime's sources (the checkout stays clean),
    then an atomic rename into `dist_dir`; wheels of other versions are removed."""
    with tempfile.TemporaryDirectory(dir=dist_dir, prefix=".build-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(root / "ps_runtime", src / "ps_runtime", ignore=_SKIP)
        for name in _SOURCE_FILES:
            if (root / name).is_file():
                shutil.copy2(root / name, src / name)
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet"]
        command += ["--disable-pip-version-check", "-w", str(Path(tmp) / "out"), str(src)]
        if importlib.util.find_spec("setuptools") is not None:
            command.append("--no-build-isolation")  # no download of the build backend
        try:
            built = subprocess.run(
                command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise WheelUnavailable(f"building the agent wheel failed: {exc}") from None
        wheels = list((Path(tmp) / "out").glob("*.whl"))
        if built.returncode != 0 or len(wheels) != 1:
            raise WheelUnavailable(
                f"building the agent wheel failed (pip exit {built.returncode}): "
                f"{(built.stderr or built.stdout).strip()[-2000:]}"
            )
        if wheels[0].name != path.name:  # pip refuses a wheel renamed to another version
            raise WheelUnavailable(f"the build made {wheels[0].name}, expected {path.name}")
        wheels[0].replace(path)
    for old in dist_dir.glob(f"{DIST_NAME.replace('-', '_')}-*.whl"):
        if old != path:
            old.unlink(missing_ok=True)
