"""`python -m ps_runtime.task`: run one task of a job from the environment of
docs/protocol.md §2 (role ps, worker or coordinator)."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Mapping
from types import FrameType
from typing import Any

from ps_runtime import stop_request
from ps_runtime.stop_request import StopRequested, Terminated

log = logging.getLogger("ps_runtime.task")

# The coordinator's exit code when a parameter server was lost (EX_TEMPFAIL): the
# platform restarts the job from its last checkpoint instead of failing it.
EXIT_PS_LOST = 75

ROLES = ("coordinator", "ps", "worker")
STARTUP_TIMEOUT_ENV = "TRAINHUB_STARTUP_TIMEOUT"  # optional, seconds (default 120)
STOP_GRACE_SECONDS = 5.0


class TaskConfigError(RuntimeError):
    """The task environment is missing or malformed."""


def _require(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise TaskConfigError(
            f"{name} is not set; see docs/protocol.md §2 for the task environment"
        )
    return value


def serve(role: str, env: Mapping[str, str]) -> int:
    """Serve a PS shard or worker on TRAINHUB_BIND until SIGTERM/SIGINT; stop gracefully."""
    bind = _require(env, "TRAINHUB_BIND")
    token = _require(env, "TRAINHUB_JOB_TOKEN")
    index = int(env.get("TRAINHUB_TASK_INDEX", "0") or 0)
    try:
        server, port = _create_server(role, bind, token, index, env)
    except RuntimeError as e:
        if "bind" not in str(e).lower():
            raise
        raise TaskConfigError(
            f"cannot listen on {bind}: the port is in use on this node. TrainHub hands task "
            "ports out of TRAINHUB_TASK_PORT_MIN..MAX (a server setting); keep that range free "
            "of other services"
        ) from e
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("%s %d serving on %s (port %d)", role, index, bind, port)
    while not stop.wait(1.0):
        pass
    log.info("%s %d stopping", role, index)
    server.stop(STOP_GRACE_SECONDS).wait()
    return 0


def _create_server(
    role: str, bind: str, token: str, index: int, env: Mapping[str, str]
) -> tuple[Any, int]:
    from ps_runtime.ps_server import create_ps_server
    from ps_runtime.worker_server import create_worker_server

    if role == "ps":
        return create_ps_server(
            bind,
            token=token,
            shard_index=index,
            checkpoint_dir=env.get("TRAINHUB_CHECKPOINT_DIR") or None,
        )
    return create_worker_server(bind, token=token)


def run_coordinator(env: Mapping[str, str]) -> int:
    """Wait for the cluster, then call TRAINHUB_ENTRYPOINT(**TRAINHUB_ARGS)."""
    from ps_runtime.closures import resolve_function
    from ps_runtime.cluster import ClusterResolver

    entrypoint = _require(env, "TRAINHUB_ENTRYPOINT")
    try:
        kwargs = json.loads(env.get("TRAINHUB_ARGS") or "{}")
    except json.JSONDecodeError as e:
        raise TaskConfigError(f"TRAINHUB_ARGS is not valid JSON: {e}") from None
    if not isinstance(kwargs, dict):
        raise TaskConfigError("TRAINHUB_ARGS must be a JSON object of keyword arguments")
    _require(env, "TRAINHUB_CLUSTER")
    _require(env, "TRAINHUB_JOB_TOKEN")

    # Terminated at once, unless the entrypoint opts in to saving a checkpoint first.
    stop_request.install()
    resolver = ClusterResolver()
    timeout = float(env.get(STARTUP_TIMEOUT_ENV) or 120)
    resolver.wait_until_healthy(timeout=timeout)
    log.info("cluster ready: %s; calling %s(**%s)", resolver, entrypoint, kwargs)
    fn = resolve_function(entrypoint)
    try:
        result: Any = fn(**kwargs)
    except Exception as e:
        # A PS that died under a coordinator-side call (save, evaluation) shows up as a raw
        # gRPC error; name the shard instead, as the coordinator does for closures.
        from ps_runtime.coordinator import UnavailableError, ps_unavailable_error

        named = None if isinstance(e, UnavailableError) else ps_unavailable_error(resolver, e)
        if named is not None:
            raise named from e
        raise
    if result is not None:
        try:
            print(json.dumps({"result": result}, default=str), flush=True)
        except (TypeError, ValueError):
            print(f"result: {result!r}", flush=True)
    return 0


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
    try:
        role = _require(env, "TRAINHUB_ROLE")
        if role not in ROLES:
            raise TaskConfigError(f"TRAINHUB_ROLE={role!r}; expected one of {list(ROLES)}")
        if role == "coordinator":
            return run_coordinator(env)
        return serve(role, env)
    except StopRequested as e:
        print(e, file=sys.stderr, flush=True)
        return 0
    except Terminated:
        print("terminated by SIGTERM", file=sys.stderr, flush=True)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        return 130
    except TaskConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    except Exception as e:
        from ps_runtime.closure_queue import UnavailableError

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
            return 128 + signal.SIGTERM
        traceback.print_exc()
        sys.stderr.flush()
        return EXIT_PS_LOST if isinstance(e, UnavailableError) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # grpc's background threads can delay interpreter exit; the outcome is decided.
    os._exit(code)
