"""How tasks are kept apart from the agent and from each other (docs/protocol.md §2).

In every mode a task's environment is an allow-list (`task_environment`): its own
`TRAINHUB_*` variables from the desired task, a few locale and path variables, and what
the agent adds (metrics fd, cluster file, `CUDA_VISIBLE_DEVICES`) — never the agent's
credential, passwords, `REDIS_URL`, `DATABASE_URL` or `DJANGO_*`.

Every task runs in a bubblewrap sandbox (`sandbox`). An agent running as root
(`sandbox`) runs each job as its own uid, leased per node from `TRAINHUB_TASK_UID_RANGE`
(`identities`), inside a cgroup per task that enforces memory, CPU and the number of
processes. An unprivileged agent (`sandbox-user`) sandboxes its tasks the same way, as
its own uid, and the scheduler never puts two teams on such a node at once. An agent that
cannot sandbox fails closed: it reports `unavailable` and refuses to start tasks, saying
what to fix. Only `TRAINHUB_TASK_ISOLATION=none`, an explicit opt-out for development,
runs tasks unsandboxed (`none`).
"""

from __future__ import annotations

import logging
import os
import site
import stat
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import ps_runtime
from ps_runtime import taskenv
from ps_runtime.agent import cgroups, identities, sandbox
from ps_runtime.agent.messages import IsolationMode

logger = logging.getLogger(__name__)

# Agent settings (never passed to a task).
# "auto" (default): sandbox every task, or start none (report "unavailable" and say why);
# "required": the agent refuses to run at all when it cannot sandbox; "none": run tasks
# unsandboxed as the agent's user (development only).
ISOLATION_ENV = "TRAINHUB_TASK_ISOLATION"
ISOLATION_SETTINGS = ("auto", "required", "none")
UID_RANGE_ENV = "TRAINHUB_TASK_UID_RANGE"
TASK_PYTHON_ENV = "TRAINHUB_TASK_PYTHON"
DEFAULT_UID_RANGE = "200000-265535"

# What `Isolation.mode` reports to the control plane (heartbeat `isolation`).
MODE_NONE = IsolationMode.NONE
MODE_SANDBOX = IsolationMode.SANDBOX
MODE_SANDBOX_USER = IsolationMode.SANDBOX_USER
MODE_UNAVAILABLE = IsolationMode.UNAVAILABLE

# Taken from the agent's own environment; everything else is dropped.
PASSED_FROM_AGENT = ("PATH", "LANG", "LC_ALL", "TZ")
# The agent's TLS files for task gRPC, passed through (docs/protocol.md §2).
PASSED_TASK_VARIABLES = (taskenv.TLS_CERT.name, taskenv.TLS_KEY.name, taskenv.TLS_CA.name)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
TASK_PREFIX = "TRAINHUB_"


class IsolationError(RuntimeError):
    """A setting or the host does not allow the configured isolation; says what to fix."""


def task_environment(
    agent_env: Mapping[str, str],
    desired_env: Mapping[str, str],
    *,
    home: str,
    pythonpath: Sequence[str] = (),
    gpu_indices: Sequence[int] = (),
    pass_agent_tls: bool = True,
) -> dict[str, str]:
    """The whole environment of a task process, built from an allow-list.

    `desired_env` comes from the control plane; only its `TRAINHUB_*` names are kept.
    `agent_env` contributes `PATH`, `LANG`, `LC_ALL`, `TZ` and (unless sandboxed: the
    agent's files are not in the sandbox, and a node's key is no job's) the TLS file
    variables, nothing else. The caller adds the metrics fd and the cluster file.
    """
    env: dict[str, str] = {}
    passed = PASSED_FROM_AGENT + (PASSED_TASK_VARIABLES if pass_agent_tls else ())
    for name in passed:
        if agent_env.get(name):
            env[name] = agent_env[name]
    env.setdefault("PATH", DEFAULT_PATH)
    for name, value in desired_env.items():
        if name.startswith(TASK_PREFIX):
            env[name] = value
        else:
            logger.warning("not passing %s to a task: only TRAINHUB_* variables are", name)
    env["HOME"] = home
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indices)
    return env


def runtime_pythonpath() -> list[str]:
    """Where this runtime and its dependencies are imported from, for a task interpreter
    that is not the agent's own (a venv's packages are invisible to /usr/bin/python3)."""
    source_root = str(Path(ps_runtime.__file__).resolve().parent.parent)
    paths = [source_root]
    for path in [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]:
        if path not in paths:
            paths.append(path)
    for path in site.getsitepackages():
        if path not in paths:
            paths.append(path)
    # An agent started with PYTHONPATH (its packages outside any site directory) gives
    # its tasks the same.
    for path in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if path and path not in paths:
            paths.append(path)
    return paths


def parse_uid_range(text: str, name: str = UID_RANGE_ENV) -> range:
    """`"200000-265535"` (inclusive) as a range; never includes uid 0."""
    low, sep, high = text.strip().partition("-")
    if not (sep and low.isascii() and high.isascii() and low.isdigit() and high.isdigit()):
        raise IsolationError(f"{name}={text!r} must look like 200000-265535")
    first, last = int(low), int(high)
    if first < 1000 or last < first or last >= 2**32 - 1:
        raise IsolationError(
            f"{name}={text!r}: uids must be ≥ 1000, in order, and below 4294967295"
        )
    return range(first, last + 1)


def _executable_by_others(path: Path) -> bool:
    """Whether a uid other than ours can execute `path`: o+x on it and o+x on every parent."""
    try:
        resolved = path.resolve(strict=True)
    except OSError:
        return False
    for part in [resolved, *resolved.parents]:
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH:
            return False
    return True


def _same_version_pythons() -> list[Path]:
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return [Path("/usr/bin") / name, Path("/usr/local/bin") / name]


def resolve_task_python(environ: Mapping[str, str], *, isolating: bool) -> str:
    """The interpreter tasks run: `TRAINHUB_TASK_PYTHON`, else the agent's own when a task
    uid can run it, else a system Python of the same version (so the agent's compiled
    packages load in it)."""
    configured = environ.get(TASK_PYTHON_ENV, "")
    if configured:
        if isolating and not _executable_by_others(Path(configured)):
            raise IsolationError(
                f"{TASK_PYTHON_ENV}={configured} cannot be run by the task uids "
                "(it and every directory above it need o+x)"
            )
        return configured
    if not isolating or _executable_by_others(Path(sys.executable)):
        return sys.executable
    for candidate in _same_version_pythons():
        if _executable_by_others(candidate):
            return str(candidate)
    raise IsolationError(
        f"the agent's Python {sys.executable} cannot be run by the task uids and no "
        f"system python{sys.version_info.major}.{sys.version_info.minor} was found: "
        f"set {TASK_PYTHON_ENV} to an interpreter every user can run"
    )


def check_reachable(path: Path) -> None:
    """Raise unless other uids can traverse `path` and every directory above it."""
    path.mkdir(parents=True, exist_ok=True)
    resolved = path.resolve()
    for part in [resolved, *resolved.parents]:
        if not part.stat().st_mode & stat.S_IXOTH:
            raise IsolationError(
                f"{path} is not reachable by the task uids: {part} has no o+x "
                "(use a work or checkpoint directory every user can traverse)"
            )


@dataclass(frozen=True, slots=True)
class Isolation:
    """The agent's isolation settings, decided once at start."""

    mode: IsolationMode = MODE_NONE
    python: str = sys.executable
    pythonpath: tuple[str, ...] = ()
    box: sandbox.Sandbox | None = None
    leases: identities.Identities | None = None
    hierarchy: cgroups.Hierarchy | None = None
    problem: str = ""  # why tasks cannot start (mode "unavailable")

    @property
    def isolating(self) -> bool:
        """Whether each job runs as its own uid (a root agent's sandbox)."""
        return self.leases is not None

    @property
    def refuses_tasks(self) -> bool:
        return self.mode == MODE_UNAVAILABLE

    @classmethod
    def from_settings(
        cls,
        work_dir: Path,
        environ: Mapping[str, str] | None = None,
        *,
        euid: int | None = None,
        cgroup_root: Path = cgroups.CGROUP_ROOT,
        private: Sequence[Path] = (),
    ) -> Isolation:
        """Read the agent settings and check, by starting the runtime in a sandbox once,
        that this node can sandbox tasks. A node that cannot gives mode `unavailable`
        (every task is refused, with the cause); under `required` it is an error.
        `private`: paths of the agent's own (its state file) that no sandbox may hold.

        Raises:
            IsolationError: naming the setting or path that is wrong.
        """
        env = os.environ if environ is None else environ
        euid = os.geteuid() if euid is None else euid
        wanted = env.get(ISOLATION_ENV, "auto") or "auto"
        if wanted not in ISOLATION_SETTINGS:
            raise IsolationError(f"{ISOLATION_ENV}={wanted!r} must be one of {ISOLATION_SETTINGS}")
        pythonpath = tuple(runtime_pythonpath())
        if wanted == "none":
            return cls(MODE_NONE, resolve_task_python(env, isolating=False), pythonpath)
        root = euid == 0
        leases: identities.Identities | None = None
        try:
            python = resolve_task_python(env, isolating=root)
            bwrap = sandbox.bwrap_path(env)
            box = sandbox.Sandbox(
                bwrap,
                sandbox.runtime_mounts(python, pythonpath, private=(work_dir, *private))
                + sandbox.data_paths(env),
                sandbox.scratch_bytes(env),
                disable_userns=sandbox.bwrap_version(bwrap) >= (0, 8),
            )
            probe_identity = None
            if root:
                uids = parse_uid_range(env.get(UID_RANGE_ENV, "") or DEFAULT_UID_RANGE)
                check_reachable(work_dir)
                leases = identities.Identities(work_dir / identities.LEASES_FILE, uids)
                probe_identity = (uids[-1], uids[-1])
            if os.geteuid() == euid:  # a test that pretends another euid skips the probe
                box.probe(python, pythonpath, probe_identity, work_dir / "probe")
        except (IsolationError, sandbox.SandboxError) as exc:
            if wanted == "required":
                raise IsolationError(str(exc)) from None
            logger.error("this node cannot sandbox tasks; it will start none: %s", exc)
            return cls(MODE_UNAVAILABLE, sys.executable, pythonpath, problem=str(exc))
        hierarchy = cgroups.detect(cgroup_root) if root else None
        mode = MODE_SANDBOX if root else MODE_SANDBOX_USER
        return cls(mode, python, pythonpath, box, leases, hierarchy)

    def describe(self) -> str:
        if self.mode == MODE_NONE:
            return (
                "tasks are NOT sandboxed (TRAINHUB_TASK_ISOLATION=none): they run as this "
                "agent's user and can read what it can, its credential included"
            )
        if self.mode == MODE_UNAVAILABLE:
            return f"this node starts no task: it cannot sandbox them ({self.problem})"
        if self.leases is None:
            return f"tasks sandboxed ({self.mode}) as this agent's user, python {self.python}"
        uids = self.leases.uids
        cgroup = (
            f"cgroup v{self.hierarchy.version}" if self.hierarchy else "no cgroup (RLIMIT_AS only)"
        )
        return (
            f"tasks sandboxed ({self.mode}): uids {uids.start}-{uids.stop - 1} leased per "
            f"job, {cgroup}, python {self.python}"
        )
