"""`trainhub-agent enroll --name --labels`: the name and labels go with the node's facts;
a malformed label is refused before anything is sent (ps_runtime.agent.labels)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.agent import cli
from ps_runtime.agent.labels import MAX_LABELS, LabelError, check_labels, parse_labels

from .control_plane import FakeControlPlane


def _enroll(*extra: str, state: Path) -> tuple[int, list[dict[str, Any]]]:
    async def scenario() -> tuple[int, list[dict[str, Any]]]:
        cp = await FakeControlPlane().start()
        try:
            args = ["enroll", "--server", cp.url, "--token", "good-token"]
            code = await asyncio.to_thread(cli.main, [*args, "--state-file", str(state), *extra])
            return code, cp.enrollments
        finally:
            await cp.close()

    return asyncio.run(scenario())


def test_name_and_labels_are_sent_with_the_facts(tmp_path: Path) -> None:
    state = tmp_path / "agent.json"
    code, [sent] = _enroll("--name", "rack4-gpu1", "--labels", "zone=eu-1, rack=4", state=state)
    assert code == 0 and state.exists()
    assert sent["hostname"] == "rack4-gpu1"
    assert sent["labels"] == {"zone": "eu-1", "rack": "4"}


def test_without_them_the_hostname_and_no_labels(tmp_path: Path) -> None:
    code, [sent] = _enroll(state=tmp_path / "agent.json")
    assert code == 0
    assert (sent["hostname"], sent["labels"]) == (socket.gethostname(), {})


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ("zone", "must be written key=value"),
        ("zone=a,zone=b", "given twice"),
        ("zone=eu 1", "label zone='eu 1'"),
        ("-zone=x", "label name '-zone'"),
    ],
)
def test_a_bad_label_is_refused_before_anything_is_sent(
    labels: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "agent.json"
    code, sent = _enroll(f"--labels={labels}", state=state)
    assert code == 2 and sent == [] and not state.exists()
    assert message in capsys.readouterr().err


def test_labels_rules() -> None:
    assert parse_labels("") == {}
    assert parse_labels("a=,example.com/team=ml_1.x") == {"a": "", "example.com/team": "ml_1.x"}
    with pytest.raises(LabelError, match=f"at most {MAX_LABELS}"):
        check_labels({f"k{i}": "v" for i in range(MAX_LABELS + 1)})
    with pytest.raises(LabelError, match="label name"):
        check_labels({"x" * 64: "v"})
