"""One task of a job, run from the environment of docs/protocol.md §2 (role ps, worker or
coordinator); `python -m ps_runtime.task` is the command that runs it."""

from __future__ import annotations

import faulthandler
import io
import json
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Mapping
from types import FrameType
from typing import Any

from ps_runtime import taskenv
from ps_runtime.coordinator import stop_request
from ps_runtime.coordinator.stop_request import StopRequested, Terminated
from ps_runtime.taskenv import Role, TaskEnvError, TaskEnvironment

log = logging.getLogger("ps_runtime.task")

STOP_GRACE_SECONDS = 5.0


def serve(env: TaskEnvironment) -> int:
    """Serve a PS shard or worker on its bind address until SIGTERM/SIGINT; stop gracefully."""
    bind = env.bind
    assert bind is not None  # TaskEnvironment.from_env requires it for ps and worker
    try:
        server, port = _create_server(env, bind)
    except RuntimeError as e:
        if "bind" not in str(e).lower():
            raise
        port_text = bind.rpartition(":")[2]
        raise TaskEnvError(
            f"cannot listen on {bind}: the port is in use on node {socket.gethostname()} "
            f"(port {port_text}, taken by another process). The node's agent reports the "
            "ports in use, so the next attempt gets another one; TrainHub hands task ports "
            "out of TRAINHUB_TASK_PORT_MIN..MAX (a server setting): keep that range free "
            "of other services"
        ) from e
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("%s %d serving on %s (port %d)", env.role, env.index, bind, port)
    while not stop.wait(1.0):
        pass
    log.info("%s %d stopping", env.role, env.index)
    server.stop(STOP_GRACE_SECONDS).wait()
    return 0


def _create_server(env: TaskEnvironment, bind: str) -> tuple[Any, int]:
    from ps_runtime.coordinator.worker_server import create_worker_server
    from ps_runtime.server.servicer import create_ps_server

    if env.role == Role.PS:
        cluster = env.cluster
        return create_ps_server(
            bind,
            token=env.job_token,
            shard_index=env.index,
            checkpoint_dir=env.checkpoint_dir,
            addresses=cluster.ps if cluster else (),
            replication=cluster.replication if cluster else 0,
            rejoin=env.ps_rejoin,
        )
    return create_worker_server(bind, token=env.job_token)


def run_coordinator(env: TaskEnvironment) -> int:
    """Wait for the cluster, then call the entrypoint with the job's arguments."""
    from ps_runtime.coordinator.closures import resolve_function
    from ps_runtime.coordinator.cluster import ClusterResolver

    assert env.entrypoint is not None and env.cluster is not None  # checked by from_env
    kwargs = dict(env.args)
    # Terminated at once, unless the entrypoint opts in to saving a checkpoint first.
    stop_request.install()
    resolver = ClusterResolver(
        env.cluster.ps, env.cluster.worker, env.job_token, env.cluster.replication
    )
    resolver.wait_until_healthy(timeout=env.startup_timeout)
    log.info("cluster ready: %s; calling %s(**%s)", resolver, env.entrypoint, kwargs)
    fn = resolve_function(env.entrypoint)
    try:
        result: Any = fn(**kwargs)
    except Exception as e:
        # A PS that died under a coordinator-side call (save, evaluation) shows up as a raw
        # gRPC error; name the shard instead, as the coordinator does for closures.
        from ps_runtime.coordinator.cluster_coordinator import (
            UnavailableError,
            ps_unavailable_error,
        )

        named = None if isinstance(e, UnavailableError) else ps_unavailable_error(resolver, e)
        if named is not None:
            raise named from e
        raise
    if result is not None:
        try:
            print(json.dumps({"result": result}, default=str), flush=True)
        except (TypeError, ValueError):
            print(f"result: {result!r}", flush=True)
    return taskenv.EXIT_SUCCEEDED


def main(env: Mapping[str, str] | None = None) -> int:
    """Entry point; returns the process exit code: 0 success (or, for a coordinator asked
    to stop, a checkpoint saved), 1 error, 75 PS lost, 143 stopped by SIGTERM unsaved."""
    # gRPC core logs connection teardown at INFO on shutdown; keep task logs readable.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    env = os.environ if env is None else env
    # Output goes to the agent through pipes: flush per line so logs stream live.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # A stalled job's agent asks for every thread's stack (docs/protocol.md §2).
    faulthandler.register(taskenv.STACKS_SIGNAL, file=sys.stderr, all_threads=True)
    try:
        task_env = TaskEnvironment.from_env(env)
        if task_env.code_dir:
            # The job's own code comes first, so `entrypoint: mymodel:train` finds it.
            sys.path.insert(0, task_env.code_dir)
        if task_env.role == Role.COORDINATOR:
            return run_coordinator(task_env)
        return serve(task_env)
    except StopRequested as e:
        print(e, file=sys.stderr, flush=True)
        return taskenv.EXIT_STOPPED_AFTER_CHECKPOINT
    except Terminated:
        print("terminated by SIGTERM", file=sys.stderr, flush=True)
        return taskenv.EXIT_TERMINATED
    except KeyboardInterrupt:
        return 130
    except TaskEnvError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    except Exception as e:
        from ps_runtime.coordinator.closure_queue import UnavailableError

        if stop_request.requested():
            # Asked to stop, but the join or the save failed (in a cancel the PS shards stop
            # at the same moment): the stop still happened, without a checkpoint.
            if not isinstance(e, UnavailableError):
                traceback.print_exc()
            first_line = (str(e).splitlines() or [""])[0]
            print(
                f"terminated by SIGTERM without saving a checkpoint: {type(e).__name__}: "
                f"{first_line}",
                file=sys.stderr,
                flush=True,
            )
            return taskenv.EXIT_TERMINATED
        traceback.print_exc()
        sys.stderr.flush()
        from ps_runtime.shards.replicas import NoLiveReplica

        # 75 from a replacement PS too: nothing to copy, so the job restarts from its
        # last checkpoint.
        return taskenv.EXIT_PS_LOST if isinstance(e, UnavailableError | NoLiveReplica) else 1


def restore_signal_defaults() -> None:
    """A sandboxed task starts with SIGTERM, SIGINT and SIGHUP ignored (so that bubblewrap
    outlives the group's SIGTERM and reports the exit, `agent/taskwrap.py`); give them
    back their usual meaning before anything else, the user's subprocesses included."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
