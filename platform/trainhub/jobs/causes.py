"""Why a task ended: a cause id and a one-line hint that says what to do about it.

An exit code alone ("exited with code 1") sends the user to read logs, and does not say
whether the job or the cluster was at fault. The cause is classified from what the
platform already knows when the task ends (`EndFacts`): the exit status the agent
reported and its message, whether the node was lost or the job preempted, and the
task's stderr (its last Python traceback, `tracebacks`).

`CAUSES` is the table, read in order: the first entry whose predicate holds names the
cause, and its hint template words the hint. A contributor adds a cause by adding an
entry (above the ones it refines) and a test in tests/trainhub/jobs/test_causes.py.
docs/design.md §"Failure causes" lists them.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ps_runtime.taskenv import EXIT_ENVIRONMENT, EXIT_PS_LOST

from .exits import killing_signal, signal_name
from .tracebacks import PythonError, last_error

_GRPC_TRANSIENT = re.compile(r"StatusCode\.(UNAVAILABLE|DEADLINE_EXCEEDED)")
_NO_SPACE = re.compile(r"No space left on device|Errno 28\b")
_MISSING_MODULE = re.compile(r"No module named '([^'.]+)")
# The spec's key for each role's resources, for hints that say what to raise.
_RESOURCES = {
    "worker": "workers.resources",
    "ps": "parameter_servers.resources",
    "coordinator": "coordinator.resources",
}
MAX_HINT = 500
STDERR_LINES = 200  # how much of the end of a task's stderr the classification reads


@dataclass(frozen=True)
class EndFacts:
    """What the platform knows about one task's end.

    `state` is the task's final state (succeeded, failed, stopped); `exit_code` is None
    when nobody saw the process end; `stderr` is the end of the task's stderr, oldest
    line first; `oom_killed` is the agent's word that the kernel's OOM killer killed a
    process of the task's cgroup."""

    state: str
    exit_code: int | None
    role: str = "worker"
    memory_mb: int = 0
    message: str = ""
    stderr: Sequence[str] = ()
    asked_to_stop: bool = False
    node_lost: bool = False
    preempted: bool = False
    oom_killed: bool = False
    node: str = ""
    # The job made no progress for longer than its stall limit (`jobs.stalls`); `message`
    # then says how long and what the limit was.
    stalled: bool = False

    @cached_property
    def error(self) -> PythonError | None:
        return last_error(self.stderr)

    @cached_property
    def signal(self) -> int | None:
        """The signal that killed the task, if one did (`exits.killing_signal`)."""
        return killing_signal(self.exit_code)

    @property
    def signal_name(self) -> str:
        return signal_name(self.signal or 0)

    @property
    def memory_key(self) -> str:
        return f"{_RESOURCES.get(self.role, 'workers.resources')}.memory_mb"

    @property
    def tail(self) -> str:
        """The last non-blank line of stderr (for an exit code with nothing better)."""
        lines = [line.strip() for line in self.stderr if line.strip()]
        return lines[-1][:200] if lines else ""


@dataclass(frozen=True)
class Cause:
    """One row of the table: an id, when it applies, and its hint."""

    id: str
    applies: Callable[[EndFacts], bool]
    hint: Callable[[EndFacts], str] = field(repr=False)


@dataclass(frozen=True, slots=True)
class EndCause:
    """A classified end: the cause's id and its hint ("" when there is nothing to do).

    `signature` tells one failure from another of the same cause: for a Python error, its
    type and the last frame of user code (`ValueError at train.py:12`), so that the same
    error twice in a row is recognised (`jobs.retries`); "" otherwise."""

    cause: str
    hint: str
    signature: str = ""


def _grpc_status(f: EndFacts) -> str:
    """`StatusCode.UNAVAILABLE` when the end of stderr shows a transient gRPC failure."""
    found = [m[0] for line in f.stderr[-60:] if (m := _GRPC_TRANSIENT.search(line))]
    return found[-1] if found else ""


def _disk_full(f: EndFacts) -> bool:
    return f.state == "failed" and (
        "was full" in f.message or any(_NO_SPACE.search(line) for line in f.stderr[-40:])
    )


def _exception_hint(f: EndFacts) -> str:
    error = f.error
    assert error is not None
    what = f"{error.type}: {error.message}" if error.message else error.type
    where = f" at {error.user_frame.where}" if error.user_frame else ""
    missing = _MISSING_MODULE.search(error.message)
    if error.short_type in ("ModuleNotFoundError", "ImportError") and missing:
        todo = f"add {missing[1]} to environment.requirements"
    elif error.short_type == "MemoryError":
        todo = f"the task ran out of its {f.memory_mb} MiB: raise {f.memory_key}"
    elif error.user_frame is None:
        todo = "the error arose in a library or the runtime: read the task's stderr"
    else:
        todo = "fix the code there and submit the job again"
    return f"{what}{where} — {todo}"


def _killed_hint(f: EndFacts) -> str:
    if f.signal == signal.SIGKILL:
        return (
            f"the task was killed by SIGKILL from outside it; if it was near its "
            f"{f.memory_mb} MiB of memory, raise {f.memory_key}"
        )
    return f"the task was killed by {f.signal_name} from outside it (an operator or the node)"


CAUSES: tuple[Cause, ...] = (
    Cause(
        "node_lost",
        lambda f: f.node_lost or (f.state == "failed" and f.exit_code is None),
        lambda f: (
            f"node {f.node or 'of the task'} stopped answering (not the job's code); a "
            "failed job runs again with Clone"
        ),
    ),
    Cause(
        "preempted",
        lambda f: f.preempted,
        lambda f: (
            "the scheduler stopped it to make room for another job; the job waits "
            "in the queue and resumes from its last checkpoint"
        ),
    ),
    Cause(
        "stalled",
        lambda f: f.stalled,
        lambda f: (
            f"{f.message or 'no task reported progress for longer than its stall limit'}: "
            "the tasks' Python stacks are in the job's events and logs (look for a deadlock "
            "or a call that never returns); if it was only slow, raise stall.k or "
            "stall.floor_seconds"
        ),
    ),
    Cause("stopped", lambda f: f.asked_to_stop or f.state == "stopped", lambda f: ""),
    Cause("succeeded", lambda f: f.state == "succeeded", lambda f: ""),
    Cause(
        "environment_failed",
        lambda f: f.exit_code == EXIT_ENVIRONMENT,
        lambda f: (
            "the job's Python environment could not be built: check "
            "environment.requirements against the task's message"
        ),
    ),
    Cause(
        "out_of_memory",
        lambda f: f.oom_killed,
        lambda f: f"the task used more than its {f.memory_mb} MiB: raise {f.memory_key}",
    ),
    Cause("killed", lambda f: f.signal is not None, _killed_hint),
    Cause(
        "ps_lost",
        lambda f: f.exit_code == EXIT_PS_LOST,
        lambda f: (
            "a peer task was lost for good (a parameter server with no replica of its "
            "shards, or a worker that stayed away): set parameter_servers.replication to 1 "
            "to keep a backup of each shard"
        ),
    ),
    Cause(
        "disk_full",
        _disk_full,
        lambda f: (
            "the task's disk space was full: write large files to the job's "
            "checkpoint or artifact storage, not its working directory"
        ),
    ),
    Cause(
        "transient_network",
        lambda f: f.state == "failed" and bool(_grpc_status(f)),
        lambda f: (
            f"a gRPC peer was unavailable or timed out ({_grpc_status(f)}): a peer "
            "task restarted or the network dropped; max_restarts lets the job ride it out"
        ),
    ),
    Cause("user_exception", lambda f: f.error is not None, _exception_hint),
    Cause(
        "exit_code",
        lambda f: f.exit_code not in (None, 0),
        lambda f: (
            f"it exited with code {f.exit_code} without a Python traceback"
            + (f"; its stderr ended with “{f.tail}”" if f.tail else "")
            + ": read its output with `trainhub logs`"
        ),
    ),
)
UNKNOWN = EndCause("unknown", "")
NO_CAUSE = EndCause("", "")  # still running: nothing to classify


def with_cause(text: str, end: EndCause) -> str:
    """`text`, then the cause and its hint: what the job's history and message say."""
    if not end.cause:
        return text
    return f"{text} — {end.cause}: {end.hint}" if end.hint else f"{text} — {end.cause}"


def _signature(cause: str, f: EndFacts) -> str:
    if cause != "user_exception" or f.error is None:
        return ""
    frame = f.error.user_frame or (f.error.frames[-1] if f.error.frames else None)
    return f"{f.error.type} at {frame.where}" if frame else f.error.type


def classify(facts: EndFacts, table: Sequence[Cause] = CAUSES) -> EndCause:
    """The first cause of `table` that applies to `facts`, with its hint."""
    for cause in table:
        if cause.applies(facts):
            return EndCause(cause.id, cause.hint(facts)[:MAX_HINT], _signature(cause.id, facts))
    return UNKNOWN
