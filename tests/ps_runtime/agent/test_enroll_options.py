"""`trainhub-agent enroll --name --labels --token-file`: the name and labels go with the
node's facts; a malformed label is refused before anything is sent
(ps_runtime.agent.labels); the token can come from a file or standard input."""

from __future__ import annotations

import asyncio
import io
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


def _enroll_with_token_file(
    token_file: str, state: Path, monkeypatch: pytest.MonkeyPatch, stdin: str = ""
) -> tuple[int, list[dict[str, Any]]]:
    """`enroll --token-file`: the token never on the command line (issue 26, item 1)."""

    async def scenario() -> tuple[int, list[dict[str, Any]]]:
        cp = await FakeControlPlane().start()
        try:
            args = ["enroll", "--server", cp.url, "--token-file", token_file]
            code = await asyncio.to_thread(cli.main, [*args, "--state-file", str(state)])
            return code, cp.enrollments
        finally:
            await cp.close()

    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    return asyncio.run(scenario())


def test_the_token_is_read_from_a_file_or_standard_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  good-token \n")
    code, [sent] = _enroll_with_token_file(str(token_file), tmp_path / "a.json", monkeypatch)
    assert code == 0 and sent["token"] == "good-token"

    code, [sent] = _enroll_with_token_file("-", tmp_path / "b.json", monkeypatch, "good-token\n")
    assert code == 0 and sent["token"] == "good-token"
    assert (tmp_path / "b.json").exists()


@pytest.mark.parametrize(
    ("source", "message"),
    [("empty", "no enrollment token in"), ("missing", "cannot read the enrollment token")],
)
def test_a_token_file_without_a_token_is_refused_before_anything_is_sent(
    source: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "empty").write_text("\n")
    state = tmp_path / "agent.json"
    code, sent = _enroll_with_token_file(str(tmp_path / source), state, monkeypatch)
    assert code == 2 and sent == [] and not state.exists()
    assert message in capsys.readouterr().err


def test_token_and_token_file_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    both = ["enroll", "--server", "https://x", "--token", "t", "--token-file", "-"]
    for argv in (both, ["enroll", "--server", "https://x"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 2
    assert "--token-file" in capsys.readouterr().err
