"""`python -m ps_runtime.launch`: run a job's coordinator, PS shards and workers as local
processes on loopback, like torchrun.

    python -m ps_runtime.launch --ps 1 --workers 2 ps_runtime.examples.movielens:train \
        -- --data u.data --epochs 5

With `--replication R` (1 or 2, fewer than --ps) every PS shard also lives on the next R
servers, and a PS process that dies is started again on its address: it copies its
shards from a live replica while the job trains on.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from ps_runtime import taskenv
from ps_runtime.shards.replicas import check_replication
from ps_runtime.taskenv import Role

HOST = "127.0.0.1"
STOP_GRACE_SECONDS = 5.0


def free_ports(count: int) -> list[int]:
    """Ports the OS reports free right now (all held open until every one is chosen)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def parse_value(text: str) -> Any:
    """'5' -> 5, '0.1' -> 0.1, 'true'/'false' -> bool, anything else stays a string."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return text


def parse_entry_args(argv: Sequence[str]) -> dict[str, Any]:
    """Turn ['--data', 'x', '--epochs', '5', '--flag'] into keyword arguments.

    The example gives {'data': 'x', 'epochs': 5, 'flag': True}.
    """
    kwargs: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--") or len(token) == 2:
            raise SystemExit(f"launch: expected --name value after '--', got {token!r}")
        name, eq, inline = token[2:].partition("=")
        key = name.replace("-", "_")
        if eq:
            kwargs[key] = parse_value(inline)
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            kwargs[key] = parse_value(argv[i + 1])
            i += 2
        else:
            kwargs[key] = True
            i += 1
    return kwargs


def _pump(stream: IO[bytes], prefix: str, out: IO[str], lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        with lock:
            out.write(f"{prefix} {line}\n")
            out.flush()
    stream.close()


class LocalJob:
    """The processes of one locally launched job."""

    def __init__(
        self,
        entrypoint: str,
        kwargs: dict[str, Any],
        num_ps: int,
        num_workers: int,
        checkpoint_dir: str | None = None,
        replication: int = 0,
    ) -> None:
        ports = free_ports(num_ps + num_workers)
        self.cluster = taskenv.ClusterSpec(
            ps=tuple(f"{HOST}:{p}" for p in ports[:num_ps]),
            worker=tuple(f"{HOST}:{p}" for p in ports[num_ps:]),
            replication=replication,
        )
        self.token = secrets.token_urlsafe(24)
        self.entrypoint = entrypoint
        self.kwargs = kwargs
        self.checkpoint_dir = checkpoint_dir
        self.procs: list[tuple[str, int, subprocess.Popen[bytes]]] = []
        self._out_lock = threading.Lock()  # one line at a time on our stdout
        self._pumps: list[threading.Thread] = []

    def _env(self, role: Role, index: int, rejoin: bool = False) -> dict[str, str]:
        env = dict(os.environ)
        env.pop(taskenv.METRICS_FD.name, None)  # children report to their stdout
        coordinator = role == Role.COORDINATOR
        task = taskenv.TaskEnvironment(
            role=role,
            job_token=self.token,
            job_id="local",
            task_id=f"{role}-{index}",
            index=index,
            cluster=self.cluster,
            bind=None if coordinator else self._address(role, index),
            checkpoint_dir=self.checkpoint_dir or None,
            entrypoint=self.entrypoint if coordinator else None,
            args=self.kwargs if coordinator else {},
            ps_rejoin=rejoin,
        )
        env.update(task.to_env())
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _address(self, role: Role, index: int) -> str:
        return (self.cluster.ps if role == Role.PS else self.cluster.worker)[index]

    def _start(self, role: Role, index: int, rejoin: bool = False) -> subprocess.Popen[bytes]:
        env = self._env(role, index, rejoin)
        proc = subprocess.Popen(
            [sys.executable, "-m", "ps_runtime.task"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        address = env.get(taskenv.BIND.name, "-")
        with self._out_lock:
            print(f"started role={role} index={index} pid={proc.pid} address={address}", flush=True)
        prefix = f"[{role}{index}]"
        for stream, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            assert stream is not None
            t = threading.Thread(
                target=_pump, args=(stream, prefix, out, self._out_lock), daemon=True
            )
            t.start()
            self._pumps.append(t)
        self.procs.append((role, index, proc))
        return proc

    def run(self) -> int:
        """Start every process, wait for the coordinator, stop the rest; return its code."""
        for i in range(len(self.cluster.ps)):
            self._start(Role.PS, i)
        for i in range(len(self.cluster.worker)):
            self._start(Role.WORKER, i)
        coordinator = self._start(Role.COORDINATOR, 0)
        while True:
            try:
                code = coordinator.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if self.cluster.replication:
                    self._restart_dead_ps()
        self.stop()
        for t in self._pumps:
            t.join(timeout=2.0)
        return code

    def _restart_dead_ps(self) -> None:
        """Start a PS that died again, on its address; it rejoins its shards' replicas."""
        for n, (role, index, proc) in enumerate(self.procs):
            # Exit 75: a replacement with no replica to copy from; the shard is lost.
            if role == Role.PS and proc.poll() not in (None, taskenv.EXIT_PS_LOST):
                with self._out_lock:
                    print(
                        f"ps {index} (pid {proc.pid}) exited with {proc.returncode}; "
                        "starting a replacement",
                        flush=True,
                    )
                del self.procs[n]
                self._start(Role.PS, index, rejoin=True)
                return  # one per pass: the list changed

    def stop(self) -> None:
        """SIGTERM every live process, then SIGKILL what is left after the grace period."""
        for _, _, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for _, _, proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run the job, return the coordinator's exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    entry_argv: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, entry_argv = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m ps_runtime.launch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--ps", type=int, default=1, help="number of PS shards (default 1)")
    parser.add_argument("--workers", type=int, default=1, help="number of workers (default 1)")
    parser.add_argument("--checkpoint-dir", help=f"{taskenv.CHECKPOINT_DIR.name} for every task")
    parser.add_argument(
        "--replication",
        type=int,
        default=0,
        help="backups per PS shard, 0 to 2 and fewer than --ps (default 0); a PS that "
        "dies is then restarted and the job goes on",
    )
    parser.add_argument("entrypoint", help="module:function the coordinator calls")
    args = parser.parse_args(argv)
    if args.ps < 1 or args.workers < 1:
        parser.error("--ps and --workers must be at least 1")
    try:
        check_replication(args.ps, args.replication)
    except ValueError as e:
        parser.error(f"--replication: {e}")
    if ":" not in args.entrypoint:
        parser.error(f"entrypoint {args.entrypoint!r} must look like package.module:function")
    job = LocalJob(
        args.entrypoint,
        parse_entry_args(entry_argv),
        args.ps,
        args.workers,
        args.checkpoint_dir,
        args.replication,
    )

    def on_signal(signum: int, frame: Any) -> None:
        job.stop()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return job.run()
    finally:
        job.stop()
