"""What a task attempt needs on disk and on its command line before its process starts.

`prepare` lays out the task's agent-owned directory (`taskdirs`), leases the job's uid
(`identities`), prepares its checkpoint directory, writes its cluster and TLS files,
unpacks its code, and builds its allow-listed environment (a job's own Python
environment, `environments`, is mounted read-only and found through its `.pth`);
`command` wraps the task's command in its sandbox and its wrapper (`taskwrap`); `spawn`
starts it in its cgroup with its output files. The supervisor watches the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from ps_runtime import taskenv
from ps_runtime.agent import cgroups, limits, sandbox, taskdirs, taskwrap
from ps_runtime.agent.codecache import CodeCache
from ps_runtime.agent.isolation import Isolation, IsolationError, task_environment
from ps_runtime.agent.protocol import DesiredTask
from ps_runtime.agent.taskfiles import CLUSTER_FILE, STATUS_FILE, open_outputs, write_tls

# Run by path in isolated mode (-I): it needs only the standard library, and whatever
# the task's PYTHONPATH says is for the task.
WRAPPER: tuple[str, ...] = ("-I", taskwrap.__file__)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A task attempt ready to start: its environment, uid and sandbox mounts."""

    env: dict[str, str]
    identity: tuple[int, int] | None
    mounts: sandbox.TaskMounts


def prepare(
    task: DesiredTask,
    isolation: Isolation,
    task_dir: Path,
    *,
    code: CodeCache | None,
    live_jobs: Collection[int],
    env_dir: Path | None = None,
) -> Prepared:
    """Everything on disk the task needs, and its environment.

    Raises:
        IsolationError: the node cannot sandbox tasks.
        NoFreeIdentity: every task uid is leased.
        OSError: a directory or file could not be laid out (CodeError included).
    """
    if isolation.refuses_tasks:
        raise IsolationError(f"this node cannot sandbox tasks: {isolation.problem}")
    box = isolation.box
    env = task_environment(
        os.environ,
        task.env,
        home=sandbox.SCRATCH if box else os.environ.get("HOME", str(task_dir)),
        # A job's environment finds the runtime through its `.pth`, after its own packages.
        pythonpath=isolation.pythonpath if env_dir is None else (),
        gpu_indices=task.gpu_indices,
        pass_agent_tls=box is None,
    )
    checkpoint_dir = taskenv.CHECKPOINT_DIR.read(env)
    identity = None
    if isolation.leases is not None:
        identity = isolation.leases.lease(task.job_id, checkpoint_dir, live_jobs)
    run_dir = taskdirs.fresh_task_dir(task_dir, traversable=identity is not None)
    if checkpoint_dir and box is not None:
        taskdirs.prepare_checkpoint_dir(Path(checkpoint_dir), identity)
    cluster = task.env.get(taskenv.CLUSTER.name, "")
    cluster_file = taskdirs.write_run_file(run_dir, CLUSTER_FILE, cluster)
    taskenv.CLUSTER_FILE.put(env, str(cluster_file))
    if task.tls is not None:
        # The control plane's material for this job replaces the agent's own files.
        env.update(write_tls(run_dir, task.tls))
    if identity is not None:
        taskdirs.share_run_dir(run_dir, identity[1])
    # The job's own code, unpacked read-only (a CodeError is a failure to start).
    code_dir = code.prepare(task, task_dir) if code else None
    taskenv.CODE_DIR.put(env, code_dir)
    mounts = sandbox.TaskMounts(
        run_dir=run_dir,
        code_dir=Path(code_dir) if code_dir else None,
        checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None,
        gpu_indices=task.gpu_indices,
        env_dir=env_dir,
    )
    return Prepared(env, identity, mounts)


def command(
    isolation: Isolation, prepared: Prepared, task_dir: Path, argv: Sequence[str]
) -> list[str]:
    """`argv` in the task's sandbox, under its wrapper (which starts it as the job's uid
    and records its exit status in the task directory)."""
    wrap = [str(task_dir / STATUS_FILE)]
    inner = list(argv)
    if isolation.box is not None:
        inner = isolation.box.command(prepared.mounts, inner)
        wrap.append("--sandboxed")
    if prepared.identity is not None:
        wrap += ["--as", f"{prepared.identity[0]}:{prepared.identity[1]}"]
    python = isolation.python or sys.executable
    return [python, *WRAPPER, *wrap, "--", *inner]


def spawn(
    task: DesiredTask,
    isolation: Isolation,
    prepared: Prepared,
    task_dir: Path,
    argv: Sequence[str],
    cpus: Sequence[int],
    pids_max: int | None,
) -> tuple[subprocess.Popen[bytes], cgroups.TaskCgroup | None]:
    """Start the prepared task in its own session and cgroup, its output to its files.

    Raises:
        OSError, subprocess.SubprocessError: it could not start (its cgroup is removed).
    """
    cgroup: cgroups.TaskCgroup | None = None
    cgroup_fds: list[int] = []
    out_fds: dict[str, int] = {}
    env = dict(prepared.env)
    try:
        if isolation.hierarchy is not None:
            # GPU device files are numbered like nvidia-smi's indices (PCI order).
            cgroup = cgroups.create(
                isolation.hierarchy,
                f"task-{task.id}-{task.attempt}",
                task.memory_mb,
                task.cpu,
                deny_gpus=[g for g in cgroups.nvidia_devices() if g not in set(task.gpu_indices)],
                pids_max=pids_max,
            )
            cgroup_fds = cgroup.open_procs()
        # RLIMIT_AS only where no cgroup bounds memory: it limits address space, not
        # resident memory, and breaks CUDA start-up.
        as_limit = None if cgroup is not None else limits.address_space_limit(task.memory_mb)
        out_fds.update(open_outputs(task_dir))
        taskenv.METRICS_FD.put(env, out_fds["metrics"])
        proc = subprocess.Popen(
            command(isolation, prepared, task_dir, argv),
            env=env,
            cwd=task_dir,
            stdin=subprocess.DEVNULL,
            stdout=out_fds["stdout"],
            stderr=out_fds["stderr"],
            pass_fds=(out_fds["metrics"],),
            start_new_session=True,
            preexec_fn=limits.make_preexec(list(cpus), as_limit, cgroup_fds=cgroup_fds),
        )
    except BaseException:
        if cgroup is not None:
            cgroups.remove(cgroup)
        raise
    finally:
        for fd in (*out_fds.values(), *cgroup_fds):
            os.close(fd)  # the child holds its own copies
    return proc, cgroup
