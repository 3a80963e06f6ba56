"""The task environment (docs/protocol.md §2): every `TRAINHUB_*` variable a task sees.

The control plane (`trainhub.jobs.selectors`) and `python -m ps_runtime.launch` build a
`TaskEnvironment` and hand its `to_env()` to the task process; the agent adds the
variables only it can know (`CLUSTER_FILE`, `METRICS_FD`); `python -m ps_runtime.task`
reads it back with `TaskEnvironment.from_env()`. Library code that needs one variable
(the job token, the checkpoint directory, TLS files) reads it through its `Variable`
here, so each name, its parser and its format exist once.

A malformed or missing variable raises `TaskEnvError` naming it. An empty value counts
as unset, as it always has for these variables.
"""

from __future__ import annotations

import json
import math
import os
import signal
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

from ps_runtime.shards.replicas import check_replication

T = TypeVar("T")

# Exit codes of a coordinator task: the job's outcome (docs/protocol.md §2).
EXIT_SUCCEEDED = 0
# Asked to stop (SIGTERM) and saved a checkpoint first: the job resumes from it later.
EXIT_STOPPED_AFTER_CHECKPOINT = 0
# A parameter server was lost (EX_TEMPFAIL): restart every task from the last checkpoint.
EXIT_PS_LOST = 75
# The job's Python environment could not be built (EX_CONFIG; reported by the agent, never
# by a process): the job fails at once, its restarts unused, with uv's message.
EXIT_ENVIRONMENT = 78
# Stopped by SIGTERM without saving a checkpoint.
EXIT_TERMINATED = 128 + signal.SIGTERM
# On this signal a task writes every thread's Python stack to its stderr (`faulthandler`);
# the agent sends it when the job stalls and py-spy is not at hand (`agent/stacks.py`).
STACKS_SIGNAL = signal.SIGUSR2

DEFAULT_STARTUP_TIMEOUT_SECONDS = 120.0
DOCS = "see docs/protocol.md §2 for the task environment"


class TaskEnvError(RuntimeError):
    """A task environment variable is missing or malformed; the message names it."""


class Role(StrEnum):
    COORDINATOR = "coordinator"
    PS = "ps"
    WORKER = "worker"


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Addresses (`host:port`) of a job's PS shards and workers, in index order."""

    ps: tuple[str, ...] = ()
    worker: tuple[str, ...] = ()
    replication: int = 0  # backups per PS shard (0 to 2), see ps_runtime.shards.replicas

    def to_json(self) -> str:
        data: dict[str, Any] = {"ps": list(self.ps), "worker": list(self.worker)}
        if self.replication:
            data["replication"] = self.replication
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str, name: str = "TRAINHUB_CLUSTER") -> ClusterSpec:
        """Parse `{"ps": [...], "worker": [...]}`; `name` is what errors call the text."""
        try:
            data = json.loads(text)
        except ValueError as e:
            raise TaskEnvError(f"{name} is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise TaskEnvError(
                f'{name} must be a JSON object like {{"ps": [...], "worker": [...]}}'
            )
        replication = data.get("replication", 0)
        if not isinstance(replication, int) or isinstance(replication, bool):
            raise TaskEnvError(f"{name}: 'replication' must be an integer, got {replication!r}")
        ps = _addresses(data, "ps", name)
        try:
            check_replication(len(ps), replication)
        except ValueError as e:
            raise TaskEnvError(f"{name}: {e}") from None
        return cls(ps=ps, worker=_addresses(data, "worker", name), replication=replication)


def _addresses(data: Mapping[str, Any], key: str, name: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        raise TaskEnvError(f"{name}: {key!r} must be a list of 'host:port' strings, got {value!r}")
    return tuple(value)


# -- parsers: (variable name, non-empty text) -> value ----------------------------------


def _text(name: str, text: str) -> str:
    return text


def _role(name: str, text: str) -> Role:
    try:
        return Role(text)
    except ValueError:
        raise TaskEnvError(
            f"{name}={text!r} is not a role; expected one of {[r.value for r in Role]}"
        ) from None


def _is_ascii_number(text: str) -> bool:
    """Only 0-9: `str.isdigit()` also takes Arabic-Indic, fullwidth and superscript
    digits, which `int()` reads as numbers or refuses with a bare ValueError."""
    return text.isascii() and text.isdigit()


def _index(name: str, text: str) -> int:
    if not _is_ascii_number(text):
        raise TaskEnvError(f"{name}={text!r} must be a non-negative integer")
    return int(text)


def _seconds(name: str, text: str) -> float:
    try:
        # float() also reads non-ASCII digits ("١٢"): refused, as in the integer variables.
        value = float(text) if text.isascii() else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise TaskEnvError(f"{name}={text!r} must be a non-negative number of seconds")
    return value


def _address(name: str, text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not (host and sep and _is_ascii_number(port)):
        raise TaskEnvError(f"{name}={text!r} must look like host:port")
    return text


def _entrypoint(name: str, text: str) -> str:
    module, sep, attr = text.partition(":")
    if not (module and sep and attr):
        raise TaskEnvError(f"{name}={text!r} must look like package.module:function")
    return text


def _digest(name: str, text: str) -> str:
    hexpart = text.removeprefix("sha256:")
    if not text.startswith("sha256:") or len(hexpart) != 64 or hexpart.strip("0123456789abcdef"):
        raise TaskEnvError(f"{name}={text!r} must look like sha256:<64 hex digits>")
    return text


def _args(name: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise TaskEnvError(f"{name} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise TaskEnvError(f"{name} must be a JSON object of keyword arguments")
    return value


def _cluster(name: str, text: str) -> ClusterSpec:
    return ClusterSpec.from_json(text, name)


def _number_text(value: float) -> str:
    """300.0 -> "300": what the control plane always wrote for whole seconds."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass(frozen=True)
class Variable(Generic[T]):
    """One `TRAINHUB_*` variable: its name, how its text parses and how a value is written."""

    name: str
    parse: Callable[[str, str], T]
    format: Callable[[T], str] = str

    def read(self, environ: Mapping[str, str] | None = None) -> T | None:
        """The parsed value, or None when unset or empty (default: `os.environ`)."""
        text = (os.environ if environ is None else environ).get(self.name, "")
        return self.parse(self.name, text) if text else None

    def require(self, environ: Mapping[str, str] | None = None, why: str = DOCS) -> T:
        value = self.read(environ)
        if value is None:
            raise TaskEnvError(f"{self.name} is not set; {why}")
        return value

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        return bool((os.environ if environ is None else environ).get(self.name))

    def put(self, env: MutableMapping[str, str], value: T | None) -> None:
        """Write `value` into `env` (None writes nothing)."""
        if value is not None:
            env[self.name] = self.format(value)


JOB_ID = Variable("TRAINHUB_JOB_ID", _text)
TASK_ID = Variable("TRAINHUB_TASK_ID", _text)
ROLE = Variable("TRAINHUB_ROLE", _role, lambda r: r.value)
TASK_INDEX = Variable("TRAINHUB_TASK_INDEX", _index)
CLUSTER = Variable("TRAINHUB_CLUSTER", _cluster, ClusterSpec.to_json)
# Set by the agent: a file holding the job's current cluster, rewritten when it changes.
CLUSTER_FILE = Variable("TRAINHUB_CLUSTER_FILE", _text)
BIND = Variable("TRAINHUB_BIND", _address)
# "1" on a PS that replaces one that stopped: it must copy its shards from a live
# replica (it fails when none has them) instead of starting empty.
PS_REJOIN = Variable("TRAINHUB_PS_REJOIN", _text)
JOB_TOKEN = Variable("TRAINHUB_JOB_TOKEN", _text)
# Optional PEM files, passed through from the agent's own environment.
TLS_CERT = Variable("TRAINHUB_TLS_CERT", _text)
TLS_KEY = Variable("TRAINHUB_TLS_KEY", _text)
TLS_CA = Variable("TRAINHUB_TLS_CA", _text)
ENTRYPOINT = Variable("TRAINHUB_ENTRYPOINT", _entrypoint)
ARGS = Variable("TRAINHUB_ARGS", _args, json.dumps)
CHECKPOINT_DIR = Variable("TRAINHUB_CHECKPOINT_DIR", _text)
CHECKPOINT_EVERY_SECONDS = Variable("TRAINHUB_CHECKPOINT_EVERY_SECONDS", _seconds, _number_text)
STARTUP_TIMEOUT = Variable("TRAINHUB_STARTUP_TIMEOUT", _seconds, _number_text)
# The job's code archive (a spec's `code`); the agent fetches and unpacks it into
# CODE_DIR, which the task puts first on sys.path.
CODE = Variable("TRAINHUB_CODE", _digest)
CODE_DIR = Variable("TRAINHUB_CODE_DIR", _text)
# Set by the agent: the write end of a pipe that `ps_runtime.report()` writes to.
METRICS_FD = Variable("TRAINHUB_METRICS_FD", _index)

VARIABLES: tuple[Variable[Any], ...] = (
    JOB_ID,
    TASK_ID,
    ROLE,
    TASK_INDEX,
    CLUSTER,
    CLUSTER_FILE,
    BIND,
    JOB_TOKEN,
    TLS_CERT,
    TLS_KEY,
    TLS_CA,
    ENTRYPOINT,
    ARGS,
    CHECKPOINT_DIR,
    CHECKPOINT_EVERY_SECONDS,
    STARTUP_TIMEOUT,
    CODE,
    CODE_DIR,
    METRICS_FD,
)


@dataclass(frozen=True, slots=True)
class TaskEnvironment:
    """What one task process is told about its job (TLS files are passed through apart).

    A ps or worker task needs `bind`; a coordinator needs `entrypoint` and `cluster`;
    every task needs `job_token`. `from_env` checks that, `to_env` writes what is set.
    """

    role: Role
    job_token: str
    job_id: str = ""
    task_id: str = ""
    index: int = 0
    cluster: ClusterSpec | None = None
    bind: str | None = None
    checkpoint_dir: str | None = None
    # Coordinator only.
    entrypoint: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    checkpoint_every_seconds: float | None = None
    startup_timeout_seconds: float | None = None
    # Coordinator and worker: the job's code archive ("sha256:<hex>").
    code: str | None = None
    # PS: this server replaces one that stopped (PS_REJOIN).
    ps_rejoin: bool = False
    # Added by the agent.
    cluster_file: str | None = None
    metrics_fd: int | None = None
    code_dir: str | None = None

    @property
    def startup_timeout(self) -> float:
        if self.startup_timeout_seconds is None:
            return DEFAULT_STARTUP_TIMEOUT_SECONDS
        return self.startup_timeout_seconds

    def to_env(self) -> dict[str, str]:
        """The variables to add to the task's environment."""
        env: dict[str, str] = {}
        JOB_ID.put(env, self.job_id)
        TASK_ID.put(env, self.task_id)
        ROLE.put(env, self.role)
        TASK_INDEX.put(env, self.index)
        CLUSTER.put(env, self.cluster)
        JOB_TOKEN.put(env, self.job_token)
        BIND.put(env, self.bind)
        CHECKPOINT_DIR.put(env, self.checkpoint_dir)
        ENTRYPOINT.put(env, self.entrypoint)
        if self.role == Role.COORDINATOR:
            ARGS.put(env, dict(self.args))
        CHECKPOINT_EVERY_SECONDS.put(env, self.checkpoint_every_seconds)
        STARTUP_TIMEOUT.put(env, self.startup_timeout_seconds)
        CODE.put(env, self.code)
        CLUSTER_FILE.put(env, self.cluster_file)
        METRICS_FD.put(env, self.metrics_fd)
        CODE_DIR.put(env, self.code_dir)
        PS_REJOIN.put(env, "1" if self.ps_rejoin else None)
        return {k: v for k, v in env.items() if v != ""}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TaskEnvironment:
        """Read and check the environment (default `os.environ`) of this task.

        Raises:
            TaskEnvError: naming the first variable that is missing or malformed.
        """
        env = os.environ if environ is None else environ
        role = ROLE.require(env)
        if role == Role.COORDINATOR:
            entrypoint: str | None = ENTRYPOINT.require(env)
            args = ARGS.read(env) or {}
            cluster: ClusterSpec | None = CLUSTER.require(env)
            bind = BIND.read(env)
        else:
            entrypoint, args, cluster = None, {}, CLUSTER.read(env)
            bind = BIND.require(env, f"a {role} task serves gRPC on it; {DOCS}")
        code = CODE.read(env)
        if code is not None and not CODE_DIR.is_set(env):
            raise TaskEnvError(
                f"{CODE.name} is set but {CODE_DIR.name} is not: the job's code archive was "
                f"not unpacked (an agent too old to fetch code?); {DOCS}"
            )
        return cls(
            role=role,
            job_token=JOB_TOKEN.require(env),
            job_id=JOB_ID.read(env) or "",
            task_id=TASK_ID.read(env) or "",
            index=TASK_INDEX.read(env) or 0,
            cluster=cluster,
            bind=bind,
            checkpoint_dir=CHECKPOINT_DIR.read(env),
            entrypoint=entrypoint,
            args=args,
            checkpoint_every_seconds=CHECKPOINT_EVERY_SECONDS.read(env),
            startup_timeout_seconds=STARTUP_TIMEOUT.read(env),
            cluster_file=CLUSTER_FILE.read(env),
            metrics_fd=METRICS_FD.read(env),
            code=code,
            code_dir=CODE_DIR.read(env),
            ps_rejoin=PS_REJOIN.read(env) == "1",
        )
