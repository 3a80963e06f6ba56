"""Taking a stalled job's Python stacks on this node (docs/protocol.md §1, `capture_stacks`).

Every Python process of each of the job's tasks here (the task and what it started; not
the agent's wrapper) is dumped from outside with `py-spy dump --pid` where py-spy is
installed (beside the agent's interpreter, or on its PATH). Where it is not, or it fails
(it cannot read a process that SIGSTOP froze, nor one it may not trace), a process that
catches `taskenv.STACKS_SIGNAL` gets it and its `faulthandler` writes every thread's
stack to its stderr; no other process is signalled (the signal's default would kill it).
A process that neither way gives a stack is described instead ("stopped"). The dumps go
to the task's log (stderr) and, as one `stacks` message per task, to the job's events.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Protocol

from ps_runtime import taskenv
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import CaptureStacks, LogStream, StackMethod, Stacks, TaskKey
from ps_runtime.agent.stallmessages import MAX_STACKS_CHARS
from ps_runtime.agent.taskfiles import FILES, TaskProcess, decode

logger = logging.getLogger(__name__)

PROC = Path("/proc")
PYSPY_TIMEOUT_SECONDS = 20.0  # py-spy pauses the process while it reads it: seconds at most
FAULTHANDLER_WAIT_SECONDS = 3.0  # for the task's dump to land in its stderr file
MAX_PROCESSES = 8  # Python processes dumped per task (the task and a few of its children)
LOG_PREFIX = "[trainhub] "
STOPPED = ("T", "t")  # /proc states: stopped by a signal, or by a tracer


class Tasks(Protocol):
    """What the capture needs of the supervisor: the live task processes."""

    def live_pids(self) -> dict[TaskKey, int]: ...

    def get(self, key: TaskKey) -> TaskProcess | None: ...


def pyspy_path() -> str | None:
    """py-spy beside the agent's interpreter (installed with it), else on the PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def _stat(pid: int, proc: Path) -> tuple[str, str, int] | None:
    """(name, state, parent pid) of a process from /proc/<pid>/stat; None if it is gone."""
    try:
        raw = (proc / str(pid) / "stat").read_bytes().decode("utf-8", "replace")
    except OSError:
        return None
    name_end = raw.rfind(")")  # the name may hold spaces and parentheses
    fields = raw[name_end + 2 :].split()
    if name_end < 0 or len(fields) < 2:
        return None
    return raw[raw.find("(") + 1 : name_end], fields[0], int(fields[1])


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """Every process below `pid` (children first), from one scan of /proc."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name), proc)) is not None:
            children.setdefault(found[2], []).append(int(entry.name))
    out: list[int] = []
    todo = sorted(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(sorted(children.get(child, [])))
    return out


def is_python(pid: int, proc: Path = PROC) -> bool:
    found = _stat(pid, proc)
    if found is None:
        return False
    if found[0].startswith("python"):
        return True
    try:
        return b"ps_runtime.task" in (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def catches(pid: int, signum: int, proc: Path = PROC) -> bool:
    """Whether the process has a handler for `signum` (SigCgt of /proc/<pid>/status)."""
    try:
        status = (proc / str(pid) / "status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def state_of(pid: int, proc: Path = PROC) -> str:
    """The process's state letter (R running, S sleeping, T stopped…); "" if gone."""
    found = _stat(pid, proc)
    return found[1] if found else ""


def dump_pyspy(exe: str, pid: int, timeout: float = PYSPY_TIMEOUT_SECONDS) -> str | None:
    """`py-spy dump --pid PID`'s output; None when it failed or found nothing."""
    try:
        done = subprocess.run(
            [exe, "dump", "--pid", str(pid)],
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.info("py-spy could not dump process %s: %s", pid, exc)
        return None
    text = decode(done.stdout).strip()
    if done.returncode != 0 or not text:
        logger.info("py-spy could not dump process %s: %s", pid, decode(done.stderr)[:300])
        return None
    return text


def dump_faulthandler(
    pid: int, stderr: Path, wait: float = FAULTHANDLER_WAIT_SECONDS
) -> str | None:
    """Send the process `taskenv.STACKS_SIGNAL` and read what its `faulthandler` appended
    to the task's stderr file (at most `MAX_STACKS_CHARS`); None if nothing came."""
    try:
        start = stderr.stat().st_size
        os.kill(pid, taskenv.STACKS_SIGNAL)
    except OSError as exc:
        logger.info("cannot signal process %s for its stacks: %s", pid, exc)
        return None
    deadline, size, settled = time.monotonic() + wait, start, 0.0
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = stderr.stat().st_size
        if now != size:
            size, settled = now, time.monotonic()
        elif size > start and time.monotonic() - settled >= 0.3:
            break  # it grew, then stayed still: the dump is written
    if size <= start:
        return None
    fd = os.open(stderr, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        f.seek(start)
        return decode(f.read(min(size - start, 4 * MAX_STACKS_CHARS))).strip() or None


def capture_task(tp: TaskProcess, outbox: Outbox, pyspy: str | None) -> Stacks:
    """The stacks of one task's Python processes, logged to its stderr; the message that
    carries them to the job's events."""
    what = f"{tp.task.role} {tp.task.index}"
    pids = [pid for pid in descendants(tp.pid) if is_python(pid)][:MAX_PROCESSES]
    methods: set[StackMethod] = set()
    parts: list[str] = []
    for pid in pids:
        text = dump_pyspy(pyspy, pid) if pyspy else None
        if text is not None:
            methods.add(StackMethod.PY_SPY)
            parts.append(f"process {pid} (py-spy):\n{text}")
            _log(outbox, tp.key, f"stall: Python stacks of {what}, process {pid} (py-spy):")
            for line in text.splitlines():
                outbox.add_log(tp.key, LogStream.STDERR, line)
            continue
        stderr = tp.task_dir / FILES["stderr"]
        # A stopped process runs no handler: its dump would come only once it resumes.
        running = state_of(pid) not in STOPPED
        if (
            running
            and catches(pid, taskenv.STACKS_SIGNAL)
            and (text := dump_faulthandler(pid, stderr))
        ):
            # faulthandler wrote them to the task's stderr: its log has them already.
            methods.add(StackMethod.FAULTHANDLER)
            parts.append(f"process {pid} (faulthandler):\n{text}")
            continue
        why = _no_stack(pid)
        parts.append(f"process {pid}: {why}")
        _log(outbox, tp.key, f"stall: no Python stack of {what}, process {pid}: {why}")
    if not pids:
        parts.append("no Python process of the task is running")
        _log(outbox, tp.key, f"stall: no Python process of {what} is running")
    method = next(
        (m for m in (StackMethod.PY_SPY, StackMethod.FAULTHANDLER) if m in methods),
        StackMethod.NONE,
    )
    text = "\n\n".join(parts)
    if len(text) > MAX_STACKS_CHARS:
        text = text[: MAX_STACKS_CHARS - 40] + "\n… (cut; the task's log has it all)"
    return Stacks(tp.key, method, text)


def _no_stack(pid: int) -> str:
    state = state_of(pid)
    if state in STOPPED:
        return (
            "it is stopped (SIGSTOP, or a debugger holds it): it runs no code, so no "
            "stack was taken; SIGCONT resumes it"
        )
    if not state:
        return "it ended meanwhile"
    return "neither py-spy nor faulthandler gave a stack (install py-spy on the node)"


def _log(outbox: Outbox, key: TaskKey, text: str) -> None:
    outbox.add_log(key, LogStream.STDERR, LOG_PREFIX + text)


def capture_job(tasks: Tasks, outbox: Outbox, job_id: int, pyspy: str | None) -> int:
    """Take the stacks of every task of `job_id` on this node; how many tasks."""
    count = 0
    for key in sorted(tasks.live_pids()):
        tp = tasks.get(key)
        if tp is None or tp.task.job_id != job_id or tp.exited.is_set():
            continue
        try:
            stacks = capture_task(tp, outbox, pyspy)
        except OSError as exc:  # /proc or the task's files went away under us
            logger.warning("task %s: could not take its stacks: %s", key.id, exc)
            continue
        outbox.add_message(stacks, len(stacks.text))
        count += 1
    logger.info("job %s stalled: took the stacks of %d task(s)", job_id, count)
    return count


def capture_in_background(tasks: Tasks, outbox: Outbox, message: CaptureStacks) -> None:
    """`capture_job` in a thread of its own: py-spy may take seconds per process, and the
    socket's loop must go on meanwhile."""
    threading.Thread(
        target=capture_job,
        args=(tasks, outbox, message.job_id, pyspy_path()),
        name=f"stacks-{message.job_id}",
        daemon=True,
    ).start()
