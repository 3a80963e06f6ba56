"""Each job's own Python environment, built with uv and shared by digest on the node.

An environment is a virtualenv under `<work>/envs/<digest>` where the digest covers the
job's requirement lines, the Python it asked for, the node's platform and the runtime
the environment falls back to. uv builds it from its cache (hard-linked wheels:
seconds once the wheels are there) with the node's package index settings: uv's own
(`/etc/uv/uv.toml`, `UV_*` variables in the agent's environment) and pip's variables
(`PIP_INDEX_URL`, `PIP_EXTRA_INDEX_URL`, `PIP_FIND_LINKS`, `PIP_CONSTRAINT`) translated.
A `.pth` file puts the runtime's import paths after the environment's own packages, so
`ps_runtime` and its dependencies are found unless the job brings its own versions.

uv installs wheels only (`--no-build`): no package's code runs while the agent, often
root, builds (a package with no wheel for the node fails the build with uv's reason).
The agent owns every file (umask 022: tasks read, never write; the sandbox binds the
environment read-only as well). An environment is complete once its marker is written;
a half-built one (the agent died) is removed before it is built again. Environments are
kept under `TRAINHUB_ENV_BUDGET_MB`, the least recently used going first, never one a
task uses.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from ps_runtime.agent.envspec import JobEnvironment, requirement_problem
from ps_runtime.agent.uvrun import EnvironmentBuildError, Uv, python_version, runtime_requirements

__all__ = ["EnvironmentBuildError", "EnvironmentCache"]

logger = logging.getLogger(__name__)

CACHE_ENV = "TRAINHUB_ENV_CACHE"
BUDGET_ENV = "TRAINHUB_ENV_BUDGET_MB"
DEFAULT_BUDGET_MB = 20 * 1024
MARKER = ".trainhub-environment.json"
PTH_FILE = "_trainhub_runtime.pth"


def budget_bytes(environ: Mapping[str, str]) -> int:
    text = environ.get(BUDGET_ENV, "") or str(DEFAULT_BUDGET_MB)
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ValueError(f"{BUDGET_ENV}={text!r} must be a whole number of MiB ≥ 1")
    return int(text) * 1024 * 1024


def disk_bytes(root: Path) -> int:
    """Bytes on disk under `root`, each inode once (hard links into uv's cache too)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


class EnvironmentCache:
    """The node's job environments: digest, build, reuse and eviction."""

    def __init__(
        self,
        root: Path,
        *,
        python: str,
        pythonpath: Sequence[str],
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.root = root
        self.python = python
        self.pythonpath = tuple(pythonpath)
        self.cache_dir = Path(env.get(CACHE_ENV, "") or root / ".uv-cache")
        self.budget = budget_bytes(env)
        self.uv = Uv(env, self.cache_dir, root.parent)
        self._python_version = python_version(python)
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}  # guarded by _lock

    # -- where ---------------------------------------------------------------------

    def digest(self, spec: JobEnvironment) -> str:
        """One digest per (requirements, Python, platform, runtime fallback)."""
        document = {
            "requirements": sorted(r.strip() for r in spec.requirements),
            "python": spec.python or self._python_version,
            "platform": [sys.platform, platform.machine(), *platform.libc_ver()],
            "runtime": list(self.pythonpath),
            "base": self.python,
        }
        text = json.dumps(document, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def path(self, digest: str) -> Path:
        return self.root / digest

    def ready(self, spec: JobEnvironment) -> Path | None:
        """The complete environment for `spec` (marked as just used), or None."""
        path = self.path(self.digest(spec))
        marker = path / MARKER
        if not marker.is_file():
            return None
        os.utime(marker)
        return path

    def python_of(self, env_dir: Path) -> str:
        return str(env_dir / "bin" / "python")

    # -- build ---------------------------------------------------------------------

    def build(
        self, spec: JobEnvironment, on_line: Callable[[str], None], in_use: Collection[str] = ()
    ) -> Path:
        """Build the environment for `spec` unless it exists; one build per digest at a
        time (a second caller waits and reuses it). `on_line` gets uv's output lines.

        Raises:
            EnvironmentBuildError: with the failing requirement and uv's reason, or the
                timeout that ended the build.
        """
        digest = self.digest(spec)
        with self._lock:
            lock = self._building.setdefault(digest, threading.Lock())
        with lock:
            done = self.ready(spec)
            if done is not None:
                on_line(f"environment {digest} is ready (built before)")
                return done
            path = self._build(spec, digest, on_line)
        self.evict(set(in_use) | {digest})
        return path

    def _build(self, spec: JobEnvironment, digest: str, on_line: Callable[[str], None]) -> Path:
        for line in spec.requirements:
            problem = requirement_problem(line)
            if problem is not None:
                raise EnvironmentBuildError(f"requirement {line!r} {problem}")
        path = self.path(digest)
        self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.exists():
            on_line(f"removing a half-built environment at {path}")
            shutil.rmtree(path)
        deadline = time.monotonic() + spec.timeout_seconds
        started = time.monotonic()
        python = spec.python or self.python
        same_python = not spec.python or spec.python == self._python_version
        if not same_python:
            python = spec.python
        tail: list[str] = []
        self.uv.run(
            ["venv", "--python", python, "--no-project", str(path)], on_line, tail, deadline
        )
        requirements = [*spec.requirements, *(() if same_python else runtime_requirements())]
        reqs_file = path / "trainhub-requirements.txt"
        reqs_file.write_text("".join(f"{r}\n" for r in requirements))
        if requirements:
            self.uv.run(
                [
                    "pip",
                    "install",
                    "--python",
                    self.python_of(path),
                    # Wheels only: no package's code runs while the agent builds.
                    "--no-build",
                    "-r",
                    str(reqs_file),
                ],
                on_line,
                tail,
                deadline,
                spec.requirements,
            )
        self._link_runtime(path, same_python)
        self._compile(path, on_line, deadline)
        seconds = time.monotonic() - started
        size = disk_bytes(path)
        (path / MARKER).write_text(
            json.dumps(
                {
                    "requirements": list(spec.requirements),
                    "python": spec.python or self._python_version,
                    "built_seconds": round(seconds, 1),
                    "bytes": size,
                }
            )
        )
        on_line(f"environment {digest} built in {seconds:.1f} s ({size / 2**20:.0f} MiB)")
        return path

    def _link_runtime(self, path: Path, same_python: bool) -> None:
        """The runtime's import paths after the environment's own packages."""
        sites = sorted(path.glob("lib/python3*/site-packages"))
        if not sites:
            raise EnvironmentBuildError(f"uv made no site-packages under {path}")
        source = str(Path(__file__).resolve().parents[2])  # where `ps_runtime` is
        paths = list(self.pythonpath) if same_python else [source]
        (sites[0] / PTH_FILE).write_text("".join(f"{p}\n" for p in paths))

    def _compile(self, path: Path, on_line: Callable[[str], None], deadline: float) -> None:
        """Byte-compile the environment once (tasks cannot write it, so they would compile
        every module on every start). Without `site` (-S): compiling runs no package's
        code, as its `.pth` files would."""
        sites = [str(p) for p in path.glob("lib/python3*/site-packages")]
        try:
            subprocess.run(
                [self.python_of(path), "-I", "-S", "-m", "compileall", "-q", "-j", "0", *sites],
                capture_output=True,
                timeout=max(5.0, deadline - time.monotonic()),
                env={"PATH": "/usr/bin:/bin"},
                check=False,
                preexec_fn=lambda: os.umask(0o022),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise EnvironmentBuildError(f"cannot byte-compile the environment: {exc}") from None
        on_line("byte-compiled the environment")

    def abort_all(self) -> None:
        """Kill every build in progress (the agent is stopping)."""
        self.uv.abort_all()

    # -- eviction ------------------------------------------------------------------

    def environments(self) -> list[tuple[float, str, int]]:
        """(last used, digest, bytes) of every complete environment, oldest first."""
        found = []
        if not self.root.is_dir():
            return []
        for child in self.root.iterdir():
            marker = child / MARKER
            if child.name.startswith(".") or not marker.is_file():
                continue
            try:
                size = int(json.loads(marker.read_text()).get("bytes", 0))
            except (OSError, ValueError):
                size = disk_bytes(child)
            found.append((marker.stat().st_mtime, child.name, size))
        return sorted(found)

    def evict(self, in_use: Collection[str]) -> list[str]:
        """Remove the least recently used environments not in use until the rest fit the
        budget; returns the digests removed."""
        with self._lock:
            envs = self.environments()
            total = sum(size for _, _, size in envs)
            removed = []
            for _, digest, size in envs:
                if total <= self.budget:
                    break
                if digest in in_use or digest in self._building_now():
                    continue
                shutil.rmtree(self.path(digest), ignore_errors=True)
                total -= size
                removed.append(digest)
        if removed:
            logger.info("evicted environments %s (budget %d MiB)", removed, self.budget >> 20)
        if total > self.budget:
            logger.warning(
                "job environments use %d MiB, over the budget of %d MiB (%s): all in use",
                total >> 20,
                self.budget >> 20,
                BUDGET_ENV,
            )
        return removed

    def _building_now(self) -> set[str]:
        return {d for d, lock in self._building.items() if lock.locked()}
