"""What the runtime tells the agent for stall detection (`ps_runtime.reporting`): the
phases it marks (its own checkpoints and evaluations) and its completed closures, on the
metrics pipe only, never on the user's stdout."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import ps_runtime
from ps_runtime import reporting
from ps_runtime.coordinator.checkpoint_manager import CheckpointManager
from ps_runtime.coordinator.closure_queue import Closure, ClosureQueue
from ps_runtime.coordinator.evaluation import evaluate_inline


@pytest.fixture
def pipe(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The agent's pipe: `lines()` reads what was written so far, as JSON objects."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    monkeypatch.setenv("TRAINHUB_METRICS_FD", str(write_fd))
    buffer = bytearray()

    def lines() -> list[dict[str, Any]]:
        try:
            buffer.extend(os.read(read_fd, 1 << 20))
        except BlockingIOError:
            pass
        return [json.loads(line) for line in buffer.decode().splitlines()]

    yield SimpleNamespace(lines=lines)
    os.close(read_fd)
    os.close(write_fd)


def test_a_phase_is_told_when_it_begins_and_ends_even_when_it_raises(pipe: Any) -> None:
    with ps_runtime.phase("evaluation"):
        assert [(x["phase"], x["state"]) for x in pipe.lines()] == [("evaluation", "begin")]
    with pytest.raises(KeyError), ps_runtime.phase("checkpoint"):
        raise KeyError("x")
    told = pipe.lines()
    assert [(x["phase"], x["state"]) for x in told] == [
        ("evaluation", "begin"),
        ("evaluation", "end"),
        ("checkpoint", "begin"),
        ("checkpoint", "end"),
    ]
    assert all(dt.datetime.fromisoformat(x["time"]).utcoffset() == dt.timedelta(0) for x in told)
    assert all(next(iter(x)) == "phase" for x in told)  # the agent tells them by their start


def test_without_an_agent_nothing_is_written(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TRAINHUB_METRICS_FD", raising=False)
    with ps_runtime.phase("evaluation"):
        reporting.closure_completed()
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("name", ["", "Evaluation", "9lives", "a-b", "x" * 33])
def test_a_phase_name_is_a_short_lower_case_word(name: str) -> None:
    with pytest.raises(ValueError, match="phase name"), ps_runtime.phase(name):
        pass


def test_completed_closures_are_told_at_most_every_two_seconds(
    pipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(reporting, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(reporting, "_closures", 0)
    monkeypatch.setattr(reporting, "_progress_told", -reporting.PROGRESS_EVERY_SECONDS)
    for _ in range(5):
        reporting.closure_completed()  # the first is told, the next four within 2 s not
        clock[0] += 0.3
    clock[0] = 1002.0
    reporting.closure_completed()
    assert [x["progress"] for x in pipe.lines()] == [{"closures": 1}, {"closures": 6}]


def test_a_closure_that_succeeds_is_progress_one_that_fails_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    told: list[int] = []
    monkeypatch.setattr(reporting, "closure_completed", lambda: told.append(1))
    queue = ClosureQueue(max_queued=4)
    for error in (None, RuntimeError("boom"), None):
        queue.put(Closure("tests.ps_runtime.closure_fns:add", (1, 2), {}))
        closure = queue.get(worker=0, timeout=1)
        assert closure is not None
        queue.finish(closure, value=3, error=error, cancel_queued=False)
    assert len(told) == 2


class _Strategy:
    """Records when the checkpoint calls came, relative to the phases told."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self.calls: list[tuple[str, int]] = []
        self.cluster_resolver = SimpleNamespace(unavailable_ps=lambda: [])

    def save_checkpoint(self, name: str, step: int, keep: int) -> None:
        self.calls.append(("save", len(self.pipe.lines())))


def test_the_runtimes_checkpoints_and_evaluations_are_phases(pipe: Any, tmp_path: Any) -> None:
    strategy = _Strategy(pipe)
    CheckpointManager(strategy, directory=str(tmp_path)).maybe_save(10, force=True)
    assert strategy.calls == [("save", 1)]  # inside the phase
    coordinator = SimpleNamespace(
        schedule=lambda fn, args: SimpleNamespace(fetch=lambda: {"n": 1.0}),
        join=lambda: None,
    )
    assert evaluate_inline(coordinator, "m:f", num_shards=3) == {"n": 3.0}
    assert [(x["phase"], x["state"]) for x in pipe.lines()] == [
        ("checkpoint", "begin"),
        ("checkpoint", "end"),
        ("evaluation", "begin"),
        ("evaluation", "end"),
    ]
