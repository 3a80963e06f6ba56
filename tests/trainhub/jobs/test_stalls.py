"""The stall detector (`jobs.stalls`, pure), the spec's `stall:` section and its cause."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.exceptions import ValidationError
from trainhub.jobs.causes import EndFacts, classify
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.spec import parse_job_spec
from trainhub.jobs.specstall import StallSerializer
from trainhub.jobs.stalls import MIN_INTERVALS, OnStall, ProgressView, StallSpec, judge, p95

from ..factories import spec
from .conftest import World

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _view(intervals: list[float], **extra: Any) -> ProgressView:
    return ProgressView(at=T0, intervals=intervals, **extra)


def test_p95_is_the_nearest_rank_and_of_few_values_the_largest() -> None:
    assert p95([3.0, 1.0, 2.0]) == 3.0
    assert p95([float(i) for i in range(1, 21)]) == 19.0
    assert p95([float(i) for i in range(1, 101)]) == 95.0


def test_the_limit_is_k_times_the_p95_interval_but_never_below_the_floor() -> None:
    spec = StallSpec(k=2, floor_seconds=20)
    slow = _view([10.0, 12.0, 30.0])  # p95 30 s: the limit is 60 s
    assert not judge(spec, slow, _at(60)).stalled  # type: ignore[union-attr]
    verdict = judge(spec, slow, _at(61))
    assert verdict is not None and verdict.stalled
    assert (verdict.limit_s, verdict.p95_s, verdict.idle_s) == (60.0, 30.0, 61.0)
    fast = _view([1.0, 2.0, 2.0])  # 2 x 2 s is under the floor: 20 s
    assert not judge(spec, fast, _at(20)).stalled  # type: ignore[union-attr]
    assert judge(spec, fast, _at(21)).stalled  # type: ignore[union-attr]
    assert judge(StallSpec(k=3, floor_seconds=5), fast, _at(6.5)).stalled  # type: ignore[union-attr]


def test_a_job_is_not_judged_before_it_has_enough_intervals() -> None:
    spec = StallSpec()
    assert judge(spec, ProgressView(), _at(10_000)) is None
    assert judge(spec, _view([1.0] * (MIN_INTERVALS - 1)), _at(10_000)) is None
    assert judge(spec, _view([1.0] * MIN_INTERVALS), _at(10_000)) is not None


def test_a_job_is_not_judged_before_its_first_progress_since_it_last_started() -> None:
    spec, view = StallSpec(), _view([1.0] * 5)
    assert judge(spec, view, _at(1000), run_since=_at(5)) is None  # restarted since
    assert judge(spec, view, _at(1000), run_since=_at(-5)).stalled  # type: ignore[union-attr]


def test_phase_time_does_not_count_up_to_max_phase_seconds() -> None:
    spec = StallSpec(k=2, floor_seconds=20, max_phase_seconds=600)
    # 300 s since the last progress, 290 s of it in an evaluation that is still open.
    evaluating = _view([2.0] * 5, paused=0.0, phase_since=_at(10))
    assert judge(spec, evaluating, _at(300)).idle_s == 10  # type: ignore[union-attr]
    assert not judge(spec, evaluating, _at(300)).stalled  # type: ignore[union-attr]
    # Phases that ended count the same way.
    after = _view([2.0] * 5, paused=290.0)
    assert judge(spec, after, _at(305)).idle_s == 15  # type: ignore[union-attr]
    # A phase that never ends (a checkpoint hung on a dead PS) stalls the job after all.
    hung = _view([2.0] * 5, phase_since=_at(0))
    assert not judge(spec, hung, _at(600)).stalled  # type: ignore[union-attr]
    assert judge(spec, hung, _at(621)).stalled  # type: ignore[union-attr]


def test_the_verdict_says_how_long_and_its_limit() -> None:
    spec = StallSpec(k=2, floor_seconds=20)
    verdict = judge(spec, _view([1.0, 4.1, 2.0]), _at(95))
    assert verdict is not None
    assert verdict.describe(spec) == (
        "no progress for 95 s (its limit: 2 x p95 interval 4.1 s, at least 20 s)"
    )


def test_the_stall_section_defaults_and_round_trips_through_the_stored_spec() -> None:
    default = JobSpec.from_dict({"name": "a", "team": "t", "entrypoint": "m:f"})
    assert default.stall == StallSpec(2.0, 20.0, 60.0, OnStall.RESTART, 3600.0)
    stored = default.to_dict()["stall"]
    assert stored == {
        "k": 2.0,
        "floor_seconds": 20.0,
        "grace_seconds": 60.0,
        "on_stall": "restart",
        "max_phase_seconds": 3600.0,
    }
    chosen = {"k": 3, "floor_seconds": 10, "grace_seconds": 5, "on_stall": "stop"}
    assert StallSpec.from_dict(chosen) == StallSpec(3.0, 10.0, 5.0, OnStall.STOP, 3600.0)


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"k": 0.5}, "k"),
        ({"floor_seconds": 1}, "floor_seconds"),
        ({"grace_seconds": -1}, "grace_seconds"),
        ({"on_stall": "reboot"}, "on_stall"),
        ({"max_phase_seconds": "long"}, "max_phase_seconds"),
        ({"k": True}, "k"),
        ({"deadline": 3}, "deadline"),
    ],
)
def test_a_bad_stall_section_names_the_field(section: dict[str, Any], field: str) -> None:
    serializer = StallSerializer(data=section)
    assert not serializer.is_valid()
    assert set(serializer.errors) == {field}


def test_the_job_spec_reads_its_stall_section_and_refuses_a_bad_one(world: World) -> None:
    chosen = {"k": 2, "floor_seconds": 10, "grace_seconds": 5}
    parsed = parse_job_spec(spec(stall=chosen), user=world.alice)
    assert parsed.stall == StallSpec(2.0, 10.0, 5.0, OnStall.RESTART, 3600.0)
    with pytest.raises(ValidationError) as info:
        parse_job_spec(spec(stall={"k": 0, "on_stall": "x"}), user=world.alice)
    assert set(info.value.detail["stall"]) == {"k", "on_stall"}  # type: ignore[call-overload]


def test_the_stalled_cause_comes_before_stopped_and_its_hint_says_what_to_do() -> None:
    end = classify(
        EndFacts(state="stopped", exit_code=None, stalled=True, message="no progress for 95 s")
    )
    assert end.cause == "stalled"
    assert end.hint.startswith("no progress for 95 s: the tasks' Python stacks are in")
    assert "stall.floor_seconds" in end.hint
    assert classify(EndFacts(state="stopped", exit_code=None)).cause == "stopped"
