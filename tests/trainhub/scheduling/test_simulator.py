"""The simulator and the trace converters, on a synthetic trace and on small samples of the
public traces' formats shipped next to this file (`traces/`, synthetic rows, not real ones)."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from trainhub.jobs.choices import PRIORITY_WEIGHTS as PLATFORM_WEIGHTS
from trainhub.scheduling.policy import PRIORITY_WEIGHTS
from trainhub.scheduling.simulate import Simulator, cluster_from_dict, jain, load_trace
from trainhub.scheduling.simulate.inputs import InputError, TraceJob, dump_cluster, write_trace
from trainhub.scheduling.traces import openb, philly

REPO = Path(__file__).resolve().parents[3]
TRACES = Path(__file__).resolve().parent / "traces"

CLUSTER = {
    "node_groups": [
        {"count": 4, "cpu": 32, "memory_mb": 131072, "gpu": 4},
        {"count": 2, "cpu": 32, "memory_mb": 131072},
    ],
    "teams": [
        {"name": "a", "quota": {"cpu": 96, "memory_mb": 393216, "gpu": 8}},
        {
            "name": "b",
            "quota": {"cpu": 96, "memory_mb": 393216, "gpu": 8},
            "borrowing_limit": {"gpu": 4},
            "lending_limit": {"gpu": 4},
        },
    ],
}


def synthetic_trace(n: int = 150, seed: int = 3) -> list[TraceJob]:
    """Bursty submissions from two teams, GPU and CPU jobs, some elastic, some with PS."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 90)
        gpu = rng.choice([0, 1, 1])
        mn = rng.choice([1, 1, 2])
        jobs.append(
            TraceJob(
                job_id=i + 1,
                submit_time_s=round(t),
                team=rng.choice("aab"),
                priority=rng.choice(["experiment", "offline", "normal", "normal", "production"]),
                duration_s=rng.choice([300, 900, 3600, 7200]),
                workers_min=mn,
                workers_max=mn * rng.choice([1, 2, 4]),
                ps=rng.choice([0, 0, 1, 2]),
                cpu_per_worker=rng.choice([2, 4]),
                gpu_per_worker=gpu,
                memory_mb_per_worker=8192,
            )
        )
    return jobs


def test_platform_and_policy_agree_on_priority_weights() -> None:
    assert PRIORITY_WEIGHTS == {str(k): v for k, v in PLATFORM_WEIGHTS.items()}


def test_policy_and_simulator_import_no_django() -> None:
    # The package's __init__ loads the Celery app (which touches django.conf); what the
    # policy, simulator and converters import on top of that must hold no Django.
    code = (
        "import sys; import trainhub; before = set(sys.modules); "
        "import trainhub.scheduling.policy, trainhub.scheduling.simulate, "
        "trainhub.scheduling.traces.philly, trainhub.scheduling.traces.openb; "
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] == 'django'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "platform")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"
    for folder in ("policy", "simulate", "traces"):
        for path in (REPO / "platform" / "trainhub" / "scheduling" / folder).glob("*.py"):
            assert not re.search(r"^\s*(from|import)\s+(django|celery)", path.read_text(), re.M)


@pytest.mark.parametrize("policy", ["cfs", "fifo", "priority"])
def test_every_policy_completes_a_synthetic_trace_without_overcommitting(policy: str) -> None:
    sim = Simulator(cluster_from_dict(CLUSTER), synthetic_trace(), policy=policy, check=True)
    report = sim.run()
    assert report.jobs == 150 and len(sim.ended) == 150
    assert all(sim.started[j] <= sim.ended[j] for j in sim.ended)
    assert 0 < report.utilization["gpu"] <= 1 and 0 < report.jain_fairness <= 1
    assert report.avg_jct_s <= report.p95_jct_s * 2
    if policy != "cfs":
        assert report.preemptions == 0 and report.resizes == 0


def test_cfs_beats_fifo_on_the_synthetic_trace() -> None:
    cluster, trace = cluster_from_dict(CLUSTER), synthetic_trace()
    cfs = Simulator(cluster, trace, policy="cfs").run()
    fifo = Simulator(cluster, trace, policy="fifo").run()
    assert cfs.avg_jct_s < 0.85 * fifo.avg_jct_s
    assert cfs.jain_fairness > fifo.jain_fairness
    # Team b's borrowing and lending limits leave capacity idle that quota-blind fifo uses,
    # and reclaim costs lost progress: on this small cluster cfs pays a little utilization.
    assert cfs.utilization["gpu"] >= fifo.utilization["gpu"] - 0.1


def test_cli_prints_one_json_object_with_the_documented_keys(tmp_path: Path) -> None:
    dump_cluster(CLUSTER, tmp_path / "cluster.yaml")
    write_trace(synthetic_trace(40), tmp_path / "trace.csv")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainhub.scheduling.simulate",
            "--cluster",
            str(tmp_path / "cluster.yaml"),
            "--trace",
            str(tmp_path / "trace.csv"),
            "--policy",
            "priority",
            "--json",
        ],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "platform")},
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout)
    for key in (
        "avg_jct_s",
        "p95_jct_s",
        "makespan_s",
        "utilization",
        "jain_fairness",
        "preemptions",
        "borrowed_hours",
        "teams",
    ):
        assert key in out
    assert set(out["utilization"]) == {"cpu", "memory_mb", "gpu"}
    assert set(out["teams"]) == {"a", "b"} and out["teams"]["a"]["share_over_time"]


def test_bad_trace_is_refused_with_the_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_trace(synthetic_trace(3), path)
    path.write_text(
        path.read_text().replace("normal", "urgent", 1).replace("production", "urgent", 1)
    )
    with pytest.raises(InputError, match=r"t\.csv:\d: priority 'urgent'"):
        load_trace(path)


ARABIC_TWELVE, SUPERSCRIPT_TWO = "\u0661\u0662", "\u00b2"


def _trace_job(job_id: int | str, submit: float) -> TraceJob:
    return TraceJob(job_id, submit, "a", "normal", 60.0, 1, 2, 0, 4.0, 0, 1000.0)


def test_only_ascii_digits_make_a_trace_job_id_a_number(tmp_path: Path) -> None:
    # str.isdigit() takes both: int() read the first as 12 (a repeat of job 12) and refused
    # the second with a message that did not name the job_id.
    path = tmp_path / "t.csv"
    ids: list[int | str] = [12, ARABIC_TWELVE, SUPERSCRIPT_TWO]
    write_trace([_trace_job(job_id, float(i)) for i, job_id in enumerate(ids)], path)
    assert [j.job_id for j in load_trace(path)] == ids


@pytest.mark.parametrize(
    ("column", "text"),
    [
        ("workers_max", "\u0662"),
        ("ps", SUPERSCRIPT_TWO),
        ("cpu_per_worker", "\uff14"),  # fullwidth four
        ("checkpoint_every_s", ARABIC_TWELVE),
    ],
)
def test_trace_numbers_in_other_digits_are_refused_naming_the_column(
    tmp_path: Path, column: str, text: str
) -> None:
    path = tmp_path / "t.csv"
    write_trace([_trace_job(1, 0.0)], path)
    header, row = (line.split(",") for line in path.read_text().splitlines())
    row[header.index(column)] = text
    path.write_text(",".join(header) + "\n" + ",".join(row) + "\n")
    with pytest.raises(InputError) as info:
        load_trace(path)
    assert str(info.value) == f"{path}:2: {column} {text!r} is not a number in ASCII digits"


def test_jain_index() -> None:
    assert jain([1, 1, 1]) == 1
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)


def test_philly_converter_keeps_all_teams_and_states_its_derivations(tmp_path: Path) -> None:
    jobs_csv, vcs = TRACES / "philly" / "philly.csv", TRACES / "philly" / "philly_vc.csv"
    cluster, jobs = philly.convert(jobs_csv, vcs, start=4, count=40, scale=0.25)
    assert len(jobs) == 40 and jobs[0].submit_time_s == 0
    assert [j.submit_time_s for j in jobs] == sorted(j.submit_time_s for j in jobs)
    assert {t["name"] for t in cluster["teams"]} >= {j.team for j in jobs}
    assert "other" in {j.team for j in jobs}  # a VC without a size is folded into `other`
    # VC sizes 8, 4 and 2 nodes at scale 0.25, rounded up, plus one node for `other`.
    assert cluster["node_groups"] == [{"count": 5, **philly.NODE}]
    assert all(j.gpu_per_worker == 1 and j.ps == 0 for j in jobs)
    assert {j.priority for j in jobs} == {"normal", "offline", "experiment"}
    assert all(j.priority == philly.priority_for(j.duration_s) for j in jobs)
    long_multi = [j for j in jobs if j.workers_min >= 2 and j.duration_s >= 3600]
    assert long_multi and all(j.workers_max == min(2 * j.workers_min, 64) for j in long_multi)
    report = Simulator(cluster_from_dict(cluster), jobs[:30], check=True).run()
    assert report.jobs == 30


def test_openb_converter_keeps_cpu_and_gpu_nodes(tmp_path: Path) -> None:
    nodes, pods = (
        TRACES / "alibaba-openb" / "openb_node_list_all_node.csv",
        TRACES / "alibaba-openb" / "openb_pod_list_default.csv",
    )
    cluster, jobs = openb.convert(nodes, pods, node_fraction=0.25, time_scale=0.1)
    assert sum(g["count"] for g in cluster["node_groups"]) == 10  # a quarter of 40
    gpus = {g["gpu"] for g in cluster["node_groups"]}
    assert 0 in gpus and max(gpus) == 8
    assert {t["name"] for t in cluster["teams"]} == {"cpu", "gpu-1", "gpu-multi", "gpu-shared"}
    assert len(jobs) == 50  # the 10 pods still `Pending` never ran
    assert {j.priority for j in jobs} == {"production", "normal", "offline", "experiment"}
    assert all(j.gpu_per_worker == 0 for j in jobs if j.team == "cpu")
    assert all(j.gpu_per_worker == 1 for j in jobs if j.team in ("gpu-1", "gpu-shared"))
    assert all(j.duration_s <= 86400 for j in jobs)
    report = Simulator(cluster_from_dict(cluster), jobs[-40:], check=True).run()
    assert report.jobs == 40


def test_trace_cli_writes_files_the_simulator_loads(tmp_path: Path) -> None:
    from trainhub.scheduling.traces.__main__ import main

    out_cluster, out_trace = tmp_path / "cluster.yaml", tmp_path / "trace.csv"
    argv = [
        "philly",
        "--jobs",
        str(TRACES / "philly" / "philly.csv"),
        "--vcs",
        str(TRACES / "philly" / "philly_vc.csv"),
        "--start",
        "0",
        "--count",
        "20",
        "--scale",
        "0.5",
        "--cluster",
        str(out_cluster),
        "--trace",
        str(out_trace),
    ]
    assert main(argv) == 0
    assert len(load_trace(out_trace)) == 20
