"""The `embed` workload of ../shared/baselines/tensorflow_ps.md on the PS runtime, side by
side with TensorFlow's.

    .venv/bin/python bench/embedding.py --tf-python ~/tfvenv/bin/python [--runs 5] [--ps 1]
        [--workers 2] [--steps 200] [--replication R] [--tf-bench PATH] [--no-tf]

1,000,000 x 16 table, batches of 4,096 examples with 8 Zipf(1.2) ids each, logistic
head, SGD lr 0.1 on the PS (`ps_runtime.examples.embedding`). PS shards and workers
are separate `python -m ps_runtime.task` processes on loopback; the coordinator is
this process (the same 2-core budget as the TF runs: 1 PS + 2 workers + coordinator).
Timing as in the baseline: 10 warm-up steps scheduled and joined, then `--steps`
steps scheduled asynchronously and timed until `join()` returns.

Each run of ours alternates with one of TensorFlow's `embed` (the baseline's
tf_ps/bench.py, run by `--tf-python`) with the same settings: PS count, workers, steps,
warm-up, and the example's own batch size, data, seed and learning rate. Prints one
JSON line per pair and a summary line with both medians, every run's figure and
`ratio` (ours / TF). `--no-tf` runs ours alone. TF has no replication: with
`--replication R` the ratio says what ours costs with it against TF without.

    .venv/bin/python bench/embedding.py --memory [--rows 10000000] [--budget 1000000]

instead creates, pulls from and checkpoints a 10M x 16 table in one PS process, and
feeds 20M distinct ids to a table with a 1M-row budget in another, printing peak RSS
against the raw table size.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import tf_side  # noqa: E402


def embed_settings() -> dict[str, Any]:
    """The example's workload as TF's `embed` options, read from its own defaults."""
    from ps_runtime.examples import embedding

    data = inspect.signature(embedding.EmbedData).parameters
    return {
        "batch_size": data["batch_size"].default,
        "data_batches": data["batches"].default,
        "seed": data["seed"].default,
        "zipf_a": inspect.signature(embedding.make_data).parameters["zipf_a"].default,
        "lr": inspect.signature(embedding.build).parameters["lr"].default,
    }


def tf_options(num_ps: int, num_workers: int, steps: int, warmup: int) -> dict[str, Any]:
    """TF's `embed` with the same cluster, steps and workload as our run."""
    return {
        "num_ps": num_ps,
        "num_workers": num_workers,
        "steps": steps,
        "warmup_steps": warmup,
        **embed_settings(),
    }


def tf_summary(result: dict[str, Any]) -> dict[str, Any]:
    cpu = result.get("cpu_timed_window") or {}
    return {
        "workload": "embed",
        "ps": result["num_ps"],
        "workers": result["num_workers"],
        "steps": result["steps"],
        "batch_size": result["batch_size"],
        "time_s": result["time_s"],
        "steps_per_sec": result["steps_per_sec"],
        "examples_per_sec": result["examples_per_sec"],
        "last_loss": result["last_loss"],
        "startup_s": result["startup_s"],
        "cores_busy_avg": cpu.get("cores_busy_avg"),
        "tf_version": result.get("tf_version"),
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(
    num_ps: int, num_workers: int, steps: int, warmup: int, in_flight: int, replication: int = 0
) -> dict[str, Any]:
    import numpy as np

    from ps_runtime.coordinator.cluster import ClusterResolver
    from ps_runtime.coordinator.cluster_coordinator import ClusterCoordinator
    from ps_runtime.coordinator.strategy import ParameterServerStrategy
    from ps_runtime.examples import embedding
    from ps_runtime.launch.local import free_ports

    batch = embed_settings()["batch_size"]
    token = "bench"
    ports = free_ports(num_ps + num_workers)
    cluster: dict[str, Any] = {
        "ps": [f"127.0.0.1:{p}" for p in ports[:num_ps]],
        "worker": [f"127.0.0.1:{p}" for p in ports[num_ps:]],
    }
    if replication:
        cluster["replication"] = replication
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINHUB_")}
    env.update(
        PYTHONPATH=str(ROOT),
        GRPC_VERBOSITY="ERROR",
        TRAINHUB_JOB_TOKEN=token,
        TRAINHUB_CLUSTER=json.dumps(cluster),
    )
    procs = []
    started = time.perf_counter()
    try:
        for role in ("ps", "worker"):
            for i, address in enumerate(cluster[role]):
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "ps_runtime.task"],
                        cwd=ROOT,
                        env=dict(
                            env,
                            TRAINHUB_ROLE=role,
                            TRAINHUB_TASK_INDEX=str(i),
                            TRAINHUB_BIND=address,
                        ),
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        resolver = ClusterResolver(cluster["ps"], cluster["worker"], token, replication=replication)
        resolver.wait_until_healthy(timeout=120)
        startup = time.perf_counter() - started
        strategy = ParameterServerStrategy(resolver)
        coordinator = ClusterCoordinator(strategy, max_in_flight_per_worker=in_flight)
        table, head = embedding.build(strategy)
        data = coordinator.create_per_worker_dataset(embedding.EmbedData)
        for _ in range(warmup):
            coordinator.schedule(embedding.train_step, (data, table, head))
        coordinator.join()
        pids = [os.getpid()] + [p.pid for p in procs]
        cpu0 = [cpu_seconds(p) for p in pids]
        t0 = time.perf_counter()
        values = [
            coordinator.schedule(embedding.train_step, (data, table, head)) for _ in range(steps)
        ]
        coordinator.join()
        seconds = time.perf_counter() - t0
        cpu = [cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True)]
        losses = [v.fetch() for v in values[-20:]]
        rows = sum(v.shape[0] for s in strategy.stats() for v in s.variables if v.name == "embed/E")
        coordinator.shutdown()
        strategy.close()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=15)
    return {
        "workload": "embed",
        "ps": num_ps,
        "replication": replication,
        "workers": num_workers,
        "steps": steps,
        "batch_size": batch,
        "time_s": round(seconds, 4),
        "steps_per_sec": round(steps / seconds, 2),
        "examples_per_sec": round(steps * batch / seconds, 1),
        "last_loss": round(float(np.mean(losses)), 5),
        "table_rows": rows,
        "startup_s": round(startup, 2),
        "in_flight_per_worker": in_flight,
        "cores_busy_avg": round(sum(cpu) / seconds, 3),
        "cpu_s": {
            "coordinator": round(cpu[0], 3),
            **{f"ps{i}": round(c, 3) for i, c in enumerate(cpu[1 : 1 + num_ps])},
            **{f"worker{i}": round(c, 3) for i, c in enumerate(cpu[1 + num_ps :])},
        },
    }


def rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of a process in MB, from /proc."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1e3, int(fields["VmHWM"].split()[0]) / 1e3


def memory_run(rows: int, budget: int, stream: int, dim: int = 16) -> list[dict[str, Any]]:
    """A `rows`-row table created, pulled from and checkpointed in one PS process; then a
    table with a row budget fed `stream` distinct ids in another. Peak RSS vs raw size."""
    import tempfile

    import numpy as np

    from ps_runtime.coordinator.cluster import ClusterResolver
    from ps_runtime.coordinator.strategy import ParameterServerStrategy
    from ps_runtime.launch.local import free_ports
    from ps_runtime.wire import rpc

    out = []
    batch = 1 << 18
    for case in ("table", "budget"):
        (port,) = free_ports(1)
        address = f"127.0.0.1:{port}"
        ckpt = tempfile.mkdtemp(prefix="ps-bench-ckpt-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINHUB_")}
        env.update(
            PYTHONPATH=str(ROOT),
            GRPC_VERBOSITY="ERROR",
            TRAINHUB_ROLE="ps",
            TRAINHUB_BIND=address,
            TRAINHUB_JOB_TOKEN="bench",
            TRAINHUB_CHECKPOINT_DIR=ckpt,
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "ps_runtime.task"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not rpc.check_health(address, "bench"):
                time.sleep(0.1)
            idle_rss = rss_mb(proc.pid)[0]
            strategy = ParameterServerStrategy(ClusterResolver([address], ["127.0.0.1:1"], "bench"))
            raw = rows * dim * 4
            if case == "table":
                t = strategy.create_table(
                    "big", dim, initializer=("uniform", {"seed": 1}), expected_rows_per_shard=rows
                )
                t0 = time.perf_counter()
                for start in range(0, rows, batch):
                    t.lookup_async(np.arange(start, min(start + batch, rows)), unique=True).result()
                create_s = time.perf_counter() - t0
                after_create = rss_mb(proc.pid)
                ids = np.random.default_rng(0).integers(0, rows, size=batch)
                t0 = time.perf_counter()
                for _ in range(8):
                    t.lookup(ids)
                pull_rows_s = 8 * batch / (time.perf_counter() - t0)
                t0 = time.perf_counter()
                strategy.save_checkpoint("ckpt-1", step=1)
                save_s = time.perf_counter() - t0
                size = sum(
                    os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ckpt) for f in fs
                )
                current, peak = rss_mb(proc.pid)
                held = sum(v.shape[0] for s in strategy.stats() for v in s.variables)
                out.append(
                    {
                        "case": "10M-row table" if rows == 10_000_000 else "table",
                        "rows": held,
                        "dim": dim,
                        "raw_mb": raw / 1e6,
                        "idle_rss_mb": idle_rss,
                        "rss_after_create_mb": after_create[0],
                        "peak_rss_mb": peak,
                        "rss_mb": current,
                        "peak_over_raw": round(peak / (raw / 1e6), 3),
                        "peak_minus_idle_over_raw": round((peak - idle_rss) / (raw / 1e6), 3),
                        "create_s": round(create_s, 2),
                        "pull_rows_per_s": round(pull_rows_s),
                        "checkpoint_s": round(save_s, 2),
                        "checkpoint_mb": size / 1e6,
                    }
                )
            else:
                t = strategy.create_table(
                    "stream", dim, initializer=("uniform", {"seed": 1}), max_rows_per_shard=budget
                )
                most = 0
                t0 = time.perf_counter()
                for start in range(0, stream, batch):
                    t.lookup_async(
                        np.arange(start, min(start + batch, stream)) * 7 + 3, unique=True
                    ).result()
                    if (start // batch) % 8 == 0:
                        most = max(
                            most, sum(v.shape[0] for s in strategy.stats() for v in s.variables)
                        )
                seconds = time.perf_counter() - t0
                stats = [v for s in strategy.stats() for v in s.variables]
                current, peak = rss_mb(proc.pid)
                out.append(
                    {
                        "case": "row budget",
                        "budget": budget,
                        "distinct_ids": stream,
                        "rows_at_end": sum(v.shape[0] for v in stats),
                        "max_rows_seen": max(most, sum(v.shape[0] for v in stats)),
                        "rows_evicted": sum(v.rows_evicted for v in stats),
                        "ids_per_s": round(stream / seconds),
                        "budget_raw_mb": budget * dim * 4 / 1e6,
                        "idle_rss_mb": idle_rss,
                        "peak_rss_mb": peak,
                        "rss_mb": current,
                    }
                )
            strategy.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            import shutil

            shutil.rmtree(ckpt, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ps", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--runs", type=int, default=tf_side.DEFAULT_RUNS, help="of each side")
    parser.add_argument("--in-flight", type=int, default=2, help="closures in flight per worker")
    parser.add_argument("--replication", type=int, default=0, help="backups per shard")
    tf_side.add_arguments(parser)
    parser.add_argument(
        "--memory",
        action="store_true",
        help="instead: memory of a --rows table (create, pull, checkpoint) "
        "and of a --budget-row table fed --stream distinct ids",
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--budget", type=int, default=1_000_000)
    parser.add_argument("--stream", type=int, default=20_000_000)
    args = parser.parse_args(argv)
    if args.memory:
        for line in memory_run(args.rows, args.budget, args.stream):
            print(json.dumps(line), flush=True)
        return
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    tf_python = None if args.no_tf else tf_side.need_tf(args.tf_python, args.tf_bench)
    options = tf_options(args.ps, args.workers, args.steps, args.warmup)

    def ours(i: int) -> dict[str, Any]:
        tf_side.log(f"run {i + 1}/{args.runs}: ours ({args.ps} PS + {args.workers} workers)")
        return run_once(
            args.ps, args.workers, args.steps, args.warmup, args.in_flight, args.replication
        )

    def tf(i: int) -> dict[str, Any]:
        assert tf_python is not None
        tf_side.log(f"run {i + 1}/{args.runs}: TensorFlow")
        return tf_summary(tf_side.run_tf(tf_python, args.tf_bench, "embed", options))

    pairs = tf_side.alternate(
        args.runs, ours, tf if tf_python else None, lambda pair: print(json.dumps(pair), flush=True)
    )
    summary: dict[str, Any] = {
        "summary": "embed",
        "ps": args.ps,
        "workers": args.workers,
        "steps": args.steps,
        "replication": args.replication,
        "runs": len(pairs),
        "tf_options": options if tf_python else None,
        **tf_side.side_by_side(pairs, "examples_per_sec"),
    }
    summary["ratio"] = tf_side.ratio(summary, "examples_per_sec")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
