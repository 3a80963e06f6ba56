"""The simulator's fairness figures, checkpoints and lost work, string job ids, and the
bursty trace generator."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from trainhub.scheduling.simulate import Simulator, cluster_from_dict, load_trace
from trainhub.scheduling.simulate.fairness import entitlements, jain, limit_share
from trainhub.scheduling.simulate.inputs import InputError, TraceJob, write_trace
from trainhub.scheduling.traces import bursty


def test_entitlement_splits_idle_capacity_by_quota_and_never_beyond_demand() -> None:
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    # b asks for 10 %: a and c split the rest 5 : 2.
    e = entitlements(weights, {"a": 1.0, "b": 0.1, "c": 1.0})
    assert e["b"] == pytest.approx(0.1)
    assert e["a"] == pytest.approx(0.9 * 5 / 7) and e["c"] == pytest.approx(0.9 * 2 / 7)
    # Everyone asks for everything: the quota shares, scaled up to the whole cluster.
    e = entitlements({"a": 0.4, "b": 0.2}, {"a": 1.0, "b": 1.0})
    assert e == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    # A team without quota gets what the others leave.
    e = entitlements({"a": 0.5, "z": 0.0}, {"a": 0.3, "z": 1.0})
    assert e == pytest.approx({"a": 0.3, "z": 0.7})
    # Caps that add up to less than the cluster: each gets its cap.
    assert entitlements(weights, {"a": 0.1, "b": 0.1, "c": 0.1}) == pytest.approx(
        {"a": 0.1, "b": 0.1, "c": 0.1}
    )


def test_limit_share_is_quota_plus_borrowing_on_the_tightest_resource() -> None:
    capacity = (100.0, 1000.0, 10.0)
    assert limit_share((20, 200, 2), (math.inf,) * 3, capacity) == 1.0
    assert limit_share((20, 200, 2), (10, math.inf, 1), capacity) == pytest.approx(0.3)


def test_jain_on_entitlement_ratios() -> None:
    assert jain([1.0, 1.0]) == 1.0
    assert jain([1.47, 0.72]) == pytest.approx((2.19**2) / (2 * (1.47**2 + 0.72**2)))


CLUSTER = {
    "node_groups": [{"count": 1, "cpu": 16, "memory_mb": 64000, "gpu": 4}],
    "teams": [
        {"name": "owner", "quota": {"cpu": 16, "memory_mb": 64000, "gpu": 4}},
        {"name": "guest", "quota": {"cpu": 0, "memory_mb": 0, "gpu": 0}},
    ],
}


def _job(job_id: int | str, submit: float, team: str, duration: float, **kw: float) -> TraceJob:
    return TraceJob(job_id, submit, team, "normal", duration, 4, 4, 0, 4, 1, 16000, **kw)


def test_a_preempted_job_loses_the_work_since_its_checkpoint_and_pays_for_it() -> None:
    # The guest borrows the whole node and checkpoints every 1,000 s; the owner wants it
    # back at 1,500 s: the guest loses 500 s of work, which its completion time shows.
    trace = [
        _job("guest-1", 0.0, "guest", 5_000.0, checkpoint_every_s=1_000.0),
        _job("owner-1", 1_500.0, "owner", 100.0),
    ]
    sim = Simulator(cluster_from_dict(CLUSTER), trace, check=True)
    report = sim.run()
    assert report.preemptions == 1 and report.lost_work_s == pytest.approx(500.0)
    assert sim.ended["owner-1"] == pytest.approx(1_501.0 + 100.0)  # grace: one second
    # 5,000 s of work + 500 s redone + 30 s restart, after waiting for the owner.
    assert sim.ended["guest-1"] == pytest.approx(1_601.0 + 30.0 + 5_000.0 - 1_000.0)
    out = report.as_json()
    assert out["jain_basis"] == "entitlement" and out["lost_work_s"] == pytest.approx(500.0)
    for team in ("owner", "guest"):
        assert 0 < out["teams"][team]["share_vs_entitlement"] <= 1.0 + 1e-9


def test_share_vs_entitlement_sees_the_borrower_get_what_idle_capacity_allows() -> None:
    # The guest alone on the cluster for 1,000 s is entitled to all of it and gets it.
    sim = Simulator(cluster_from_dict(CLUSTER), [_job("g", 0.0, "guest", 1_000.0)])
    team = sim.run().as_json()["teams"]["guest"]
    assert team["avg_entitlement_when_active"] == pytest.approx(1.0)
    assert team["share_vs_entitlement"] == pytest.approx(1.0)
    assert team["share_to_quota"] is None  # no quota: the quota-share basis cannot say


def test_traces_with_string_ids_load_and_replay(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_trace([_job("a7f3-x", 0.0, "owner", 60.0), _job(12, 5.0, "guest", 60.0)], path)
    trace = load_trace(path)
    assert [j.job_id for j in trace] == ["a7f3-x", 12]
    sim = Simulator(cluster_from_dict(CLUSTER), trace)
    assert sim.run().jobs == 2 and set(sim.ended) == {"a7f3-x", 12}
    path.write_text(path.read_text() + path.read_text().splitlines()[1] + "\n")
    with pytest.raises(InputError, match=r"job_id 'a7f3-x' repeats line 2"):
        load_trace(path)


def test_bursty_trace_has_three_unequal_teams_one_limited_and_bursts() -> None:
    cluster, jobs = bursty.generate(300, seed=5)
    assert bursty.generate(300, seed=5) == (cluster, jobs)
    assert bursty.generate(300, seed=6)[1] != jobs
    teams = {t["name"]: t for t in cluster["teams"]}
    assert set(teams) == {"vision", "speech", "research"}
    assert len({t["quota"]["gpu"] for t in teams.values()}) == 3
    assert [n for n, t in teams.items() if "borrowing_limit" in t] == ["research"]
    assert len(jobs) == 300 and len({j.job_id for j in jobs}) == 300
    assert all(isinstance(j.job_id, str) and j.job_id.startswith(j.team) for j in jobs)
    # Bursts: the busiest 10 minutes of a team hold far more than an even spread would.
    span = jobs[-1].submit_time_s
    for team in teams:
        times = [j.submit_time_s for j in jobs if j.team == team]
        busiest = max(Counter(int(t // 600) for t in times).values())
        assert busiest > 3 * len(times) * 600 / span
    report = Simulator(cluster_from_dict(cluster), jobs, check=True).run()
    assert report.jobs == 300
