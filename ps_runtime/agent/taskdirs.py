"""A task's directories on the node, laid out so the agent never follows a task's link.

`<work dir>/tasks/<id>-<attempt>/` belongs to the agent and no task can write to it:
the task's output files, its exit status and stop request live there, and so do `run/`
(cluster file and TLS files, readable by the job's gid only) and `code/` (the job's code,
read-only), which the sandbox binds read-only. The task's only writable places are its
scratch (a tmpfs inside the sandbox) and its job's checkpoint directory, which the agent
creates with `O_NOFOLLOW` relative to a parent no task can write and never walks. A
task's directory is removed once everything it produced was delivered.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

RUN_DIR = "run"
# Traversable, not listable, by the task uids (bwrap binds `run/` and `code/` as them).
AGENT_DIR_MODE = 0o711
RUN_DIR_MODE = 0o750
RUN_FILE_MODE = 0o640
CHECKPOINT_MODE = 0o700


class TaskDirError(OSError):
    """A task directory cannot be laid out safely; the message says why."""


def fresh_task_dir(path: Path, *, traversable: bool) -> Path:
    """Create the agent-owned task directory `path` (removing a leftover of an earlier
    try of the same attempt) and its `run/` directory; returns `run/`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if traversable:
        os.chmod(path.parent, AGENT_DIR_MODE)
    remove_task_dir(path)
    mode = AGENT_DIR_MODE if traversable else 0o700
    os.mkdir(path, mode)
    os.chmod(path, mode)  # mkdir's mode is masked by the umask
    run = path / RUN_DIR
    os.mkdir(run, 0o700)
    return run


def share_run_dir(run: Path, gid: int) -> None:
    """Let the job's gid read `run/` and its files (it can write none of them)."""
    os.chown(run, 0, gid)
    os.chmod(run, RUN_DIR_MODE)
    for entry in os.scandir(run):
        os.chown(entry.path, 0, gid, follow_symlinks=False)
        os.chmod(entry.path, RUN_FILE_MODE, follow_symlinks=False)


def write_run_file(run: Path, name: str, text: str) -> Path:
    """Write `run/name` atomically; readable by the job's gid when `run/` is shared."""
    st = os.stat(run)
    tmp = run / f".{name}.tmp"
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            if st.st_gid != os.getegid():
                os.fchown(out.fileno(), -1, st.st_gid)
                os.fchmod(out.fileno(), RUN_FILE_MODE)
            out.write(text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    target = run / name
    os.replace(tmp, target)
    return target


def remove_task_dir(path: Path) -> None:
    """Remove an agent-owned task directory and everything in it (read-only code too).

    Nothing in it is a task's: `shutil.rmtree` never follows links anyway."""
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(root, name), 0o700, follow_symlinks=False)
    os.chmod(path, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def prepare_checkpoint_dir(path: Path, identity: tuple[int, int] | None) -> None:
    """Create the job's checkpoint directory, owned by `identity` (the job's uid:gid)
    when given, without following a link anywhere a task could have planted one.

    Its parent (the node's checkpoint root) must not be writable by anyone but the
    agent: a task able to write there could swap the job's directory for a link.

    Raises:
        TaskDirError: the parent is writable by others, or the directory is not a
            directory, or belongs to another uid.
    """
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        pst = os.fstat(pfd)
        if pst.st_uid not in (0, os.geteuid()) or pst.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise TaskDirError(
                f"the checkpoint root {parent} is writable by users other than the agent's "
                f"(owner uid {pst.st_uid}, mode {oct(pst.st_mode & 0o7777)}): make it "
                "owned by the agent's user and not group- or world-writable"
            )
        if identity is not None and not pst.st_mode & stat.S_IXOTH:
            os.chmod(pfd, (pst.st_mode & 0o7777) | stat.S_IXOTH)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path.name, CHECKPOINT_MODE, dir_fd=pfd)
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=pfd)
        except OSError as exc:
            raise TaskDirError(
                f"the checkpoint directory {path} is not a directory: {exc}"
            ) from None
        try:
            st = os.fstat(fd)
            if identity is not None:
                if st.st_uid not in (0, identity[0]):
                    raise TaskDirError(
                        f"the checkpoint directory {path} belongs to uid {st.st_uid}, not "
                        f"this job's uid {identity[0]}: remove it or give it to the job"
                    )
                os.fchown(fd, *identity)
            os.fchmod(fd, CHECKPOINT_MODE)
        finally:
            os.close(fd)
    finally:
        os.close(pfd)
