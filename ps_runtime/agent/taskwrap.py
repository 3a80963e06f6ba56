"""A task's parent inside its session: `python -I …/taskwrap.py STATUS -- CMD…`.

It starts CMD, waits for it and writes its exit status to STATUS (the `returncode` of
`subprocess`: negative for death by a signal), so an agent that was down while the task
ended can still report how it ended. It ignores SIGTERM/SIGINT itself (the agent signals
the whole group; the task decides) and the task dies with it (parent-death signal), so
killing the wrapper never leaves the task running unseen. It imports only the standard
library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def write_status(path: str, returncode: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as out:
        out.write(f"{returncode}\n")
    os.replace(tmp, path)


def read_status(path: str) -> int | None:
    """The recorded exit status, or None when there is none (yet)."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -I taskwrap.py STATUS -- CMD...", file=sys.stderr)
        return 2
    status, command = argv[0], argv[2:]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # A handler, not SIG_IGN: handlers are reset by exec, so the task gets the default.
        signal.signal(sig, lambda *_: None)
    try:
        # close_fds=False: the task inherits its metrics file descriptor.
        child = subprocess.Popen(command, preexec_fn=_die_with_parent, close_fds=False)
    except OSError as exc:
        print(f"cannot start {command[0]}: {exc}", file=sys.stderr)
        write_status(status, 127)
        return 127
    while True:
        try:
            returncode = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries already
            continue
    write_status(status, returncode)
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
