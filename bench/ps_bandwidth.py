"""Dense pull/push bandwidth of the PS runtime against raw grpcio over loopback.

    .venv/bin/python bench/ps_bandwidth.py [--shards 1 2] [--iters 10] [--mib 64]

For each shard count, starts that many PS processes (`python -m ps_runtime.task`),
creates one float32 variable of `--mib` MiB (sliced into one part per shard), and
times `Variable.read(out=buffer)` (pull into a reused array; `pull_fresh_array_mb_s`
is `read()` into a new one) and `Variable.push_gradient()` (push, SGD applied on the
PS). In the same run, interleaved round-robin with those, it starts as many raw grpcio
servers (this file with --raw-server: bytes in, bytes out, no numpy, no PS logic) and
times moving the same bytes one way, split over the servers concurrently: a unary
call and streams of 1, 2 and 4 MiB chunks, both directions; `raw_mb_s` is the best of
those. Prints one JSON line per shard count: shards, pull_mb_s, push_mb_s, raw_mb_s,
ratio = min(pull, push) / raw, plus the raw figure per method. MB = 10^6 bytes;
medians over --iters.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MIB = 1 << 20
RAW_OPTIONS = [
    ("grpc.max_send_message_length", 256 * MIB),
    ("grpc.max_receive_message_length", 256 * MIB),
]
RAW_METHODS = ("/raw.Raw/Get", "/raw.Raw/GetStream", "/raw.Raw/Put")


# ------------------------------------------------------------------ raw grpcio server


def raw_server(port: int) -> None:
    """Serve raw bytes: Get (unary), GetStream (chunks), Put (stream in, size out)."""
    from concurrent import futures

    import grpc

    cache: dict[tuple[int, int], list[bytes]] = {}

    def chunks(total: int, chunk: int) -> list[bytes]:
        key = (total, chunk)
        if key not in cache:
            cache[key] = [b"\x01" * min(chunk, total - i) for i in range(0, total, chunk)]
        return cache[key]

    def get(request: bytes, context: Any) -> bytes:
        total = int(request.decode())
        return chunks(total, total)[0]

    def get_stream(request: bytes, context: Any) -> Iterator[bytes]:
        total, chunk = (int(x) for x in request.decode().split(","))
        yield from chunks(total, chunk)

    def put(request_iterator: Iterator[bytes], context: Any) -> bytes:
        return str(sum(len(b) for b in request_iterator)).encode()

    handler = grpc.method_handlers_generic_handler(
        "raw.Raw",
        {
            "Get": grpc.unary_unary_rpc_method_handler(get),
            "GetStream": grpc.unary_stream_rpc_method_handler(get_stream),
            "Put": grpc.stream_unary_rpc_method_handler(put),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(4), options=RAW_OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def raw_methods(
    ports: list[int], total: int
) -> tuple[dict[str, Callable[[], object]], Callable[[], None]]:
    """Raw transfers of `total` bytes split over the servers at `ports`, and a closer."""
    import grpc

    channels = [grpc.insecure_channel(f"127.0.0.1:{p}", options=RAW_OPTIONS) for p in ports]
    for c in channels:
        grpc.channel_ready_future(c).result(timeout=120)
    share = total // len(ports)
    pool = ThreadPoolExecutor(len(ports))
    get = [c.unary_unary(RAW_METHODS[0]) for c in channels]
    get_stream = [c.unary_stream(RAW_METHODS[1]) for c in channels]
    put = [c.stream_unary(RAW_METHODS[2]) for c in channels]
    payloads = {
        chunk: [b"\x02" * min(chunk, share - i) for i in range(0, share, chunk)]
        for chunk in (MIB, 2 * MIB, 4 * MIB)
    }
    unary_payload = b"\x02" * share

    def fan_out(call: Callable[[int], Any]) -> Callable[[], None]:
        def run() -> None:
            list(pool.map(call, range(len(ports))))

        return run

    def unary_down(i: int) -> Any:
        return get[i](str(share).encode())

    def unary_up(i: int) -> Any:
        return put[i](iter([unary_payload]))

    def stream_down(chunk: int) -> Callable[[int], int]:
        return lambda i: sum(len(b) for b in get_stream[i](f"{share},{chunk}".encode()))

    def stream_up(pieces: list[bytes]) -> Callable[[int], Any]:
        return lambda i: put[i](iter(pieces))

    methods: dict[str, Callable[[], object]] = {
        "unary_down": fan_out(unary_down),
        "unary_up": fan_out(unary_up),
    }
    for chunk, pieces in payloads.items():
        mib = chunk // MIB
        methods[f"stream{mib}_down"] = fan_out(stream_down(chunk))
        methods[f"stream{mib}_up"] = fan_out(stream_up(pieces))

    def close() -> None:
        pool.shutdown()
        for c in channels:
            c.close()

    return methods, close


def interleaved_medians(
    methods: dict[str, Callable[[], Any]], iters: int, warmup: int = 2
) -> dict[str, float]:
    """Median seconds per method, running the methods round-robin so load drifts
    (the machine is shared) hit all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in methods}
    for i in range(warmup + iters):
        for name, fn in methods.items():
            start = time.perf_counter()
            fn()
            if i >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


# ------------------------------------------------------------------------ PS side


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def run(shards: int, mib: int, iters: int, chunk_mib: float) -> dict[str, Any]:
    import numpy as np

    from ps_runtime.coordinator.cluster import ClusterResolver
    from ps_runtime.coordinator.strategy import ParameterServerStrategy
    from ps_runtime.launch.local import free_ports
    from ps_runtime.server.optimizers import SGD
    from ps_runtime.shards.sharding import fixed_shards_partitioner
    from ps_runtime.wire import rpc

    token = "bench"
    ports = free_ports(2 * shards)
    ps_ports, raw_ports = ports[:shards], ports[shards:]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINHUB_")}
    base_env.update(PYTHONPATH=str(ROOT), GRPC_VERBOSITY="ERROR")
    procs = []
    try:
        for i, port in enumerate(ps_ports):
            env = dict(
                base_env,
                TRAINHUB_ROLE="ps",
                TRAINHUB_TASK_INDEX=str(i),
                TRAINHUB_BIND=f"127.0.0.1:{port}",
                TRAINHUB_JOB_TOKEN=token,
            )
            procs.append(start(["-m", "ps_runtime.task"], env))
        for port in raw_ports:
            procs.append(
                start([str(Path(__file__).resolve()), "--raw-server", str(port)], base_env)
            )
        addresses = [f"127.0.0.1:{p}" for p in ps_ports]
        for a in addresses:
            deadline = time.monotonic() + 60
            while not rpc.check_health(a, token):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"PS at {a} did not start")
                time.sleep(0.1)
        total = mib * MIB
        methods, close_raw = raw_methods(raw_ports, total)
        strategy = ParameterServerStrategy(
            ClusterResolver(addresses, ["127.0.0.1:1"], token),
            variable_partitioner=fixed_shards_partitioner(shards),
        )
        strategy.ps_client.chunk_bytes = int(chunk_mib * MIB)
        v = strategy.create_variable(
            "v", (total // 4 // 1024, 1024), "float32", optimizer=SGD(learning_rate=0.001)
        )
        grad = np.ones(v.shape, np.float32)
        buffer = np.empty(v.shape, np.float32)
        methods["ps_pull"] = lambda: v.read(out=buffer)  # into a reused buffer
        methods["ps_pull_alloc"] = v.read  # into a fresh array each time
        methods["ps_push"] = lambda: v.push_gradient(grad)
        seconds = interleaved_medians(methods, iters)
        close_raw()
        strategy.close()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=15)
    pull, push = total / seconds.pop("ps_pull") / 1e6, total / seconds.pop("ps_push") / 1e6
    pull_alloc = total / seconds.pop("ps_pull_alloc") / 1e6
    raw = {name: total / s / 1e6 for name, s in seconds.items()}
    best = max(raw.values())
    return {
        "shards": shards,
        "pull_mb_s": round(pull, 1),
        "push_mb_s": round(push, 1),
        "raw_mb_s": round(best, 1),
        "ratio": round(min(pull, push) / best, 3),
        "pull_fresh_array_mb_s": round(pull_alloc, 1),
        "bytes": total,
        "iters": iters,
        "chunk_mib": chunk_mib,
        "raw_by_method_mb_s": {k: round(r, 1) for k, r in raw.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument(
        "--chunk-mib", type=float, default=2.0, help="chunk size of the PS client's streams"
    )
    parser.add_argument("--raw-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw_server:
        raw_server(args.raw_server)
        return
    for shards in args.shards:
        print(json.dumps(run(shards, args.mib, args.iters, args.chunk_mib)), flush=True)


if __name__ == "__main__":
    main()
