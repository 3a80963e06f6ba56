"""A task's parent inside its session: `python -I …/taskwrap.py STATUS [--as UID:GID
--sandboxed] -- CMD…`.

It starts CMD, waits for it and writes its exit status to STATUS (the `returncode` of
`subprocess`: negative for death by a signal), so an agent that was down while the task
ended can still report how it ended. It stays the agent's user (STATUS is in the agent's
directory) and starts CMD as UID:GID when given. It ignores SIGTERM/SIGINT itself (the
agent signals the whole group; the task decides) and the task dies with it (parent-death
signal), so killing the wrapper never leaves the task running unseen.

With `--sandboxed`, CMD is bubblewrap: it starts with SIGTERM, SIGINT and SIGHUP ignored
(inherited across exec), so that bubblewrap's own process survives the group's SIGTERM
and reports the task's exit; the task (`ps_runtime.task`) restores the defaults first
thing. bubblewrap exits 128+N for a task killed by signal N, recorded as -N. It imports
only the standard library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _child_setup(identity: tuple[int, int] | None, sandboxed: bool) -> Callable[[], None]:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

    def setup() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if sandboxed:
            for sig in _FORWARDED:
                signal.signal(sig, signal.SIG_IGN)
        if identity is not None:
            os.setgroups([])
            os.setgid(identity[1])
            os.setuid(identity[0])

    return setup


def _parse_identity(text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    if not (uid.isascii() and uid.isdigit() and gid.isascii() and gid.isdigit()):
        raise ValueError(f"--as {text!r} must be UID:GID")
    return int(uid), int(gid)


def write_status(path: str, returncode: int) -> None:
    tmp = f"{path}.tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"{returncode}\n")
    os.replace(tmp, path)


def read_status(path: str) -> int | None:
    """The recorded exit status, or None when there is none (yet). Reads at most 32
    bytes, never through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            text = f.read(32).strip()
    except OSError:
        return None
    if not (text.isascii() and text.lstrip(b"-").isdigit()):
        return None
    return int(text)


def main(argv: list[str]) -> int:
    usage = "usage: python -I taskwrap.py STATUS [--as UID:GID] [--sandboxed] -- CMD..."
    if "--" not in argv[1:] or not argv:
        print(usage, file=sys.stderr)
        return 2
    split = argv.index("--", 1)
    status, options, command = argv[0], argv[1:split], argv[split + 1 :]
    identity: tuple[int, int] | None = None
    sandboxed = False
    try:
        while options:
            option = options.pop(0)
            if option == "--as" and options:
                identity = _parse_identity(options.pop(0))
            elif option == "--sandboxed":
                sandboxed = True
            else:
                raise ValueError(f"unknown option {option!r}")
    except ValueError as exc:
        print(f"{exc}; {usage}", file=sys.stderr)
        return 2
    if not command:
        print(usage, file=sys.stderr)
        return 2
    for sig in _FORWARDED:
        # A handler, not SIG_IGN: handlers are reset by exec, so the task gets the default.
        signal.signal(sig, lambda *_: None)
    try:
        # close_fds=False: the task inherits its metrics file descriptor.
        child = subprocess.Popen(
            command, preexec_fn=_child_setup(identity, sandboxed), close_fds=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"cannot start {command[0]}: {exc}", file=sys.stderr)
        write_status(status, 127)
        return 127
    returncode = child.wait()  # PEP 475: retried after a signal's handler ran
    if sandboxed and returncode > 128:
        try:
            returncode = -signal.Signals(returncode - 128).value
        except ValueError:
            pass
    write_status(status, returncode)
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
