"""Cooperative SIGTERM in-process: who opts in, the second SIGTERM, the PS watchdog."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.coordinator import stop_request
from ps_runtime.coordinator.checkpoint_manager import CheckpointManager
from ps_runtime.coordinator.stop_request import StopRequested, Terminated


@pytest.fixture
def sigterm_handler() -> Iterator[None]:
    """`stop_request.install()` for one test; pytest's own handler comes back after."""
    previous = signal.getsignal(signal.SIGTERM)
    stop_request.install()
    try:
        yield
    finally:
        stop_request._reset_for_tests()
        signal.signal(signal.SIGTERM, previous)


class FakeResolver:
    def __init__(self) -> None:
        self.down: list[tuple[int, str]] = []

    def unavailable_ps(self) -> list[tuple[int, str]]:
        return self.down


class FakeStrategy:
    def __init__(self) -> None:
        self.cluster_resolver = FakeResolver()
        self.saved: list[tuple[str, int]] = []

    def save_checkpoint(self, name: str, step: int = 0, keep: int = 0) -> list[str]:
        self.saved.append((name, step))
        return []


def _manager(directory: str | None, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("TRAINHUB_CHECKPOINT_DIR", raising=False)
    return CheckpointManager(FakeStrategy(), directory=directory)


def test_sigterm_terminates_at_once_until_the_loop_opts_in(sigterm_handler: None) -> None:
    with pytest.raises(Terminated):
        signal.raise_signal(signal.SIGTERM)


def test_opted_in_loop_saves_then_stops_and_a_second_sigterm_terminates(
    sigterm_handler: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = _manager(str(tmp_path), monkeypatch)
    assert manager.stop_requested() is False  # opts in
    signal.raise_signal(signal.SIGTERM)  # recorded, not raised
    assert manager.stop_requested() is True
    with pytest.raises(StopRequested) as stopped:
        manager.save_and_stop(37)
    assert (stopped.value.step, stopped.value.checkpoint) == (37, "step-000000000037")
    assert (
        str(stopped.value) == "stopped on request at step 37 after saving checkpoint "
        "step-000000000037"
    )
    assert manager.strategy.saved == [("step-000000000037", 37)]
    with pytest.raises(Terminated):
        signal.raise_signal(signal.SIGTERM)


def test_without_a_checkpoint_dir_there_is_no_opt_in(
    sigterm_handler: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = _manager(None, monkeypatch)
    assert manager.stop_requested() is False
    with pytest.raises(Terminated):
        signal.raise_signal(signal.SIGTERM)
    with pytest.raises(RuntimeError, match="needs a checkpoint directory"):
        manager.save_and_stop(3)


def test_outside_the_task_runner_stop_requested_stays_false(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = _manager(str(tmp_path), monkeypatch)
    assert manager.stop_requested() is False
    assert stop_request._unavailable_ps is None  # nothing would act on a request


def test_a_lost_parameter_server_turns_a_pending_stop_into_terminated(
    sigterm_handler: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = _manager(str(tmp_path), monkeypatch)
    manager.stop_requested()
    signal.raise_signal(signal.SIGTERM)
    manager.strategy.cluster_resolver.down = [(0, "127.0.0.1:1")]
    started = time.monotonic()
    with pytest.raises(Terminated):
        while time.monotonic() - started < 5:  # a join that would never end
            time.sleep(0.05)
    assert time.monotonic() - started < 2 * stop_request.WATCH_SECONDS + 1
