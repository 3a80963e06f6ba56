"""A task's exit status in words, for job messages and history: never "code None"."""

from __future__ import annotations

import signal

# The agent reports death by signal N as 128 + N, as a shell does (ps_runtime.agent).
_SIGNAL_BASE = 128


def signal_name(number: int) -> str:
    """`SIGKILL` for 9; `signal 77` for a number with no name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def killing_signal(exit_code: int | None) -> int | None:
    """The signal that ended a task, if one did: exit code 128 + N, or a raw -N."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    return exit_code - _SIGNAL_BASE if exit_code > _SIGNAL_BASE else None


def exit_status(exit_code: int | None) -> str:
    """`exit code 3`, or `no exit status` when the task's end was not observed."""
    return "no exit status" if exit_code is None else f"exit code {exit_code}"


def describe_exit(exit_code: int | None) -> str:
    """How a task ended, as a predicate: `exited with code 3`, `was killed by SIGKILL
    (exit code 137)`, or `ended with no exit status` (lost: nobody saw it end)."""
    if exit_code is None:
        return "ended with no exit status"
    number = killing_signal(exit_code)
    if number is None:
        return f"exited with code {exit_code}"
    if exit_code < 0:  # a raw wait status
        return f"was killed by {signal_name(number)}"
    return f"was killed by {signal_name(number)} (exit code {exit_code})"
