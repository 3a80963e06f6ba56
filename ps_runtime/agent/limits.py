"""OS-level resource enforcement and process-group control for task processes."""

from __future__ import annotations

import math
import os
import resource
import signal
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

MIB = 1024 * 1024
# RLIMIT_AS counts *virtual* address space, which is far above resident memory for
# numerical Python: glibc reserves a 64 MiB malloc arena per thread (up to 8 per core),
# OpenBLAS/numpy reserve per-thread buffers, and gRPC/Python threads each map an 8 MiB
# stack. A 2 GiB task can therefore map 4 to 6 GiB while using 2 GiB. The limit is a
# guard against runaway allocation, not an exact cap: twice the request plus 4 GiB of
# headroom (a 2048 MiB task gets 8 GiB of address space).
AS_MULTIPLIER = 2
AS_HEADROOM_MB = 4096
# A cgroup's pids.max per task: a fork bomb stops there, not at the node's limit.
PIDS_MAX_ENV = "TRAINHUB_TASK_PIDS_MAX"
DEFAULT_PIDS_MAX = 4096


def cpu_count_for(cpu: float, available: int) -> int:
    """ceil(cpu) cores, at least one and at most what the node has; 0 means no pinning."""
    if cpu <= 0:
        return 0
    return max(1, min(available, math.ceil(cpu - 1e-9)))


def choose_cpus(node_cpus: Sequence[int], cpu: float, in_use: Counter[int]) -> list[int]:
    """Pick ceil(cpu) cores: least used by other tasks first, then lowest id (deterministic).

    An empty result means "do not restrict" (the task asked for no CPU).
    """
    count = cpu_count_for(cpu, len(node_cpus))
    if count == 0:
        return []
    ranked = sorted(node_cpus, key=lambda c: (in_use.get(c, 0), c))
    return sorted(ranked[:count])


def address_space_limit(memory_mb: int) -> int | None:
    """RLIMIT_AS in bytes for a task requesting `memory_mb`, or None for no limit."""
    if memory_mb <= 0:
        return None
    return (memory_mb * AS_MULTIPLIER + AS_HEADROOM_MB) * MIB


def pids_max(environ: Mapping[str, str]) -> int:
    """The most processes and threads one task may have (`TRAINHUB_TASK_PIDS_MAX`)."""
    text = environ.get(PIDS_MAX_ENV, "") or str(DEFAULT_PIDS_MAX)
    if not (text.isascii() and text.isdigit()) or int(text) < 16:
        raise ValueError(f"{PIDS_MAX_ENV}={text!r} must be a whole number ≥ 16")
    return int(text)


def make_preexec(
    cpus: Collection[int],
    as_limit: int | None,
    *,
    cgroup_fds: Sequence[int] = (),
) -> Callable[[], None]:
    """The function run in the child (the task's wrapper) between fork and exec.

    It does only system calls prepared in the parent (no imports, no locks, no logging),
    because preexec_fn runs in a forked copy of a multi-threaded process. The wrapper
    joins the task's cgroups and stays the agent's user; it starts the task as the job's
    uid (`taskwrap --as`). No parent-death signal: tasks outlive the agent, which adopts
    them again when it restarts.
    """
    cpu_set = set(cpus)
    limit: tuple[int, int] | None = None
    if as_limit is not None:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = as_limit if hard == resource.RLIM_INFINITY else min(as_limit, hard)
        limit = (cap, cap)
    fds = list(cgroup_fds)

    def preexec() -> None:
        for fd in fds:
            os.write(fd, str(os.getpid()).encode())
        if cpu_set:
            os.sched_setaffinity(0, cpu_set)
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, limit)

    return preexec


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids in a process group, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(_group_members(pgid))


def signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_group_gone(pgid: int, timeout: float, poll: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def terminate_group(pgid: int, grace: float) -> bool:
    """SIGTERM the whole group, SIGKILL it after `grace` seconds; True when all are gone."""
    if not group_alive(pgid):
        return True
    signal_group(pgid, signal.SIGTERM)
    if wait_group_gone(pgid, grace):
        return True
    signal_group(pgid, signal.SIGKILL)
    return wait_group_gone(pgid, 1.0)


def terminate_group_quietly(pgid: int, grace: float) -> None:
    """`terminate_group` for use as a thread target."""
    terminate_group(pgid, grace)
