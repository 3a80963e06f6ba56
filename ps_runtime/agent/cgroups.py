"""A cgroup per task that enforces its memory and CPU (v2 where present, v1 otherwise).

Every task gets `<root>/trainhub/task-<id>-<attempt>` (v2) or that path under each v1
controller it uses (`memory`, `cpu`). The task process joins it between fork and exec
(the parent opens each `cgroup.procs` file; the child writes its own pid), so nothing the
task runs ever escapes the limits. The directory is removed when the task has ended.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "trainhub"
CPU_PERIOD_US = 100_000
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """The mounted cgroup hierarchy: `version` 2 (unified) or 1 (one tree per controller)."""

    version: int
    root: Path

    def parent_dirs(self) -> list[Path]:
        if self.version == 2:
            return [self.root / PARENT]
        return [self.root / controller / PARENT for controller in ("memory", "cpu")]


def detect(root: Path = CGROUP_ROOT) -> Hierarchy | None:
    """v2 when `cgroup.controllers` sits at the root, v1 when a `memory` tree is mounted,
    None when neither is usable (then limits fall back to RLIMIT_AS)."""
    if (root / "cgroup.controllers").is_file():
        return Hierarchy(2, root)
    if (root / "memory" / "memory.limit_in_bytes").is_file():
        return Hierarchy(1, root)
    return None


@dataclass(frozen=True, slots=True)
class TaskCgroup:
    """One task's cgroup directories (one for v2, one per controller for v1)."""

    hierarchy: Hierarchy
    dirs: tuple[Path, ...]

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs]

    def open_procs(self) -> list[int]:
        """File descriptors on each `cgroup.procs`, for the child to write its pid into."""
        fds: list[int] = []
        try:
            for path in self.procs_files:
                fds.append(os.open(path, os.O_WRONLY))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _ensure_v2_parent(hierarchy: Hierarchy) -> Path:
    parent = hierarchy.root / PARENT
    parent.mkdir(exist_ok=True)
    # Controllers must be enabled on every level above the task's cgroup.
    for level in (hierarchy.root, parent):
        control = level / "cgroup.subtree_control"
        if control.exists():
            try:
                _write(control, "+memory +cpu +pids")
            except OSError:  # no pids controller here: memory and CPU still bound
                with contextlib.suppress(OSError):
                    _write(control, "+memory +cpu")
    return parent


def cpu_quota_us(cpu: float) -> int | None:
    """The CFS quota per 100 ms period for `cpu` cores; None (no limit) for cpu <= 0."""
    if cpu <= 0:
        return None
    return max(1000, math.ceil(cpu * CPU_PERIOD_US))


NVIDIA_MAJOR = 195  # /dev/nvidia<N> is char device 195:<N>


def nvidia_devices(dev: Path = Path("/dev")) -> list[int]:
    """Minor numbers of the node's GPU device files (`/dev/nvidia0`, `/dev/nvidia1`, ...)."""
    found = []
    for path in dev.glob("nvidia*"):
        suffix = path.name[len("nvidia") :]
        if suffix.isdigit():
            found.append(int(suffix))
    return sorted(found)


def create(
    hierarchy: Hierarchy,
    name: str,
    memory_mb: int,
    cpu: float,
    deny_gpus: Sequence[int] = (),
    pids_max: int | None = None,
) -> TaskCgroup:
    """Create the task's cgroup with its limits (0 means unlimited); raises OSError.

    `pids_max`: the most processes and threads of the task (the `pids` controller, where
    the hierarchy has it).

    `deny_gpus`: minors of `/dev/nvidia<N>` the task may not open, through the v1 devices
    controller when it is mounted (v2 has no devices file: only CUDA_VISIBLE_DEVICES).
    """
    memory = memory_mb * MIB if memory_mb > 0 else None
    quota = cpu_quota_us(cpu)
    if hierarchy.version == 2:
        path = _ensure_v2_parent(hierarchy) / name
        path.mkdir(exist_ok=True)
        _write(path / "memory.max", str(memory) if memory is not None else "max")
        cpu_max = f"{quota} {CPU_PERIOD_US}" if quota is not None else f"max {CPU_PERIOD_US}"
        _write(path / "cpu.max", cpu_max)
        if pids_max is not None and (path / "pids.max").exists():
            _write(path / "pids.max", str(pids_max))
        return TaskCgroup(hierarchy, (path,))
    memory_dir = hierarchy.root / "memory" / PARENT / name
    memory_dir.mkdir(parents=True, exist_ok=True)
    # Unlimited is -1 on v1; swap is not counted separately (memsw may be absent).
    _write(memory_dir / "memory.limit_in_bytes", str(memory) if memory is not None else "-1")
    dirs = [memory_dir]
    cpu_root = hierarchy.root / "cpu"
    if (cpu_root / "cpu.cfs_quota_us").is_file():
        cpu_dir = cpu_root / PARENT / name
        cpu_dir.mkdir(parents=True, exist_ok=True)
        _write(cpu_dir / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(cpu_dir / "cpu.cfs_quota_us", str(quota) if quota is not None else "-1")
        dirs.append(cpu_dir)
    pids_root = hierarchy.root / "pids"
    if pids_max is not None and (pids_root / "cgroup.procs").is_file():
        pids_dir = pids_root / PARENT / name
        pids_dir.mkdir(parents=True, exist_ok=True)
        _write(pids_dir / "pids.max", str(pids_max))
        dirs.append(pids_dir)
    devices_root = hierarchy.root / "devices"
    if deny_gpus and (devices_root / "devices.deny").is_file():
        devices_dir = devices_root / PARENT / name
        devices_dir.mkdir(parents=True, exist_ok=True)
        # The kernel takes one rule per write.
        for minor in deny_gpus:
            _write(devices_dir / "devices.deny", f"c {NVIDIA_MAJOR}:{minor} rwm")
        dirs.append(devices_dir)
    return TaskCgroup(hierarchy, tuple(dirs))


def members(cgroup: TaskCgroup) -> set[int]:
    """Pids in the task's cgroup (in any of its directories)."""
    pids: set[int] = set()
    for path in cgroup.procs_files:
        with contextlib.suppress(OSError):
            pids.update(int(line) for line in path.read_text().split() if line.isdigit())
    return pids


def oom_killed(cgroup: TaskCgroup) -> bool:
    """Whether the kernel's OOM killer killed a process of the task's cgroup: the
    `oom_kill` count of `memory.events` (v2) or `memory.oom_control` (v1, kernel 4.13+).
    Read before `remove`; False when neither file says (an older kernel)."""
    for directory in cgroup.dirs:
        for name in ("memory.events", "memory.oom_control"):
            try:
                text = (directory / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    return int(value) > 0
    return False


def kill_all(cgroup: TaskCgroup) -> None:
    """SIGKILL whatever is still in the cgroup: a process the task started in a session
    of its own escapes its process group, never its cgroup."""
    for pid in members(cgroup):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def remove(cgroup: TaskCgroup, timeout: float = 2.0) -> bool:
    """Remove the task's cgroup directories once empty; True when all are gone."""
    deadline = time.monotonic() + timeout
    gone = True
    for path in cgroup.dirs:
        while True:
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                # EBUSY while the last process is still being reaped by the kernel.
                if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                    logger.warning("cannot remove cgroup %s: %s", path, exc)
                    gone = False
                    break
                time.sleep(0.05)
    return gone
