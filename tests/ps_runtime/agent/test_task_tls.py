"""The agent hands a task the TLS material of its desired entry: files in the agent-owned
`run/` directory of the task, readable by the job's gid only, named by TRAINHUB_TLS_*;
the key never reaches the table."""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.agent import taskdirs
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import (
    DesiredTask,
    ProtocolError,
    TaskTLS,
    parse_desired_task,
)
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.agent.taskfiles import TABLE_FILE, TaskProcess, write_tls

from .helpers import FAKE_COMMAND, fake_task, log_lines, require_root, statuses, wait_for

TLS = TaskTLS(
    cert="-----BEGIN CERTIFICATE-----\nnode\n-----END CERTIFICATE-----\n",
    key="-----BEGIN PRIVATE KEY-----\nsecret-key-bytes\n-----END PRIVATE KEY-----\n",
    ca="-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n",
)
VARIABLES = ("TRAINHUB_TLS_CERT", "TRAINHUB_TLS_KEY", "TRAINHUB_TLS_CA")


def test_the_material_round_trips_and_is_checked() -> None:
    task = replace(fake_task(), tls=TLS)
    wire = task.to_wire()
    assert wire["tls"] == {"cert": TLS.cert, "key": TLS.key, "ca": TLS.ca}
    assert parse_desired_task(wire) == task
    assert (
        "tls" not in fake_task().to_wire() and parse_desired_task(fake_task().to_wire()).tls is None
    )
    assert "secret-key-bytes" not in repr(task)
    with pytest.raises(ProtocolError, match=r"^task\.tls\.key must be PEM text$"):
        parse_desired_task({**wire, "tls": {**wire["tls"], "key": "secret-key-bytes"}})
    with pytest.raises(ProtocolError, match=r"^task\.tls\.ca is required"):
        parse_desired_task({**wire, "tls": {"cert": TLS.cert, "key": TLS.key}})


def test_files_are_the_agents_and_readable_by_the_jobs_gid_only(tmp_path: Path) -> None:
    require_root()
    run = taskdirs.fresh_task_dir(tmp_path / "tasks" / "1-0", traversable=True)
    env = write_tls(run, TLS)
    taskdirs.share_run_dir(run, 200001)
    assert sorted(env) == sorted(VARIABLES)
    info = run.lstat()
    assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o750, 0, 200001)
    for name, text in zip(VARIABLES, (TLS.cert, TLS.key, TLS.ca), strict=True):
        path = Path(env[name])
        assert path.parent == run and path.read_text() == text
        info = path.lstat()
        assert stat.S_IMODE(info.st_mode) == 0o640
        assert (info.st_uid, info.st_gid) == (0, 200001)


def test_a_link_left_in_the_run_directory_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("unchanged")
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    (task_dir / "tls-key.pem").symlink_to(victim)
    (task_dir / ".tls-ca.pem.tmp").symlink_to(victim)
    env = write_tls(task_dir, TLS)
    assert victim.read_text() == "unchanged"
    assert not Path(env["TRAINHUB_TLS_KEY"]).is_symlink()
    assert Path(env["TRAINHUB_TLS_KEY"]).read_text() == TLS.key


def _run(supervisor: Supervisor, outbox: Outbox, task: DesiredTask) -> tuple[TaskProcess, Any]:
    """Run the fake task to its end; return it and the TRAINHUB_TLS_* it saw."""
    messages: list[dict[str, Any]] = []

    def succeeded() -> bool:
        messages.extend(m.to_wire() for m in outbox.drain())
        return (task.id, task.attempt, "succeeded") in statuses(messages)

    try:
        tp = supervisor.start(task)
        assert tp is not None
        wait_for(succeeded, 10, "the task to finish")
    finally:
        supervisor.stop_all(grace=0.5)
    line = next(x for x in log_lines(messages, "stdout") if x.startswith("INFO "))
    return tp, json.loads(line[5:])["tls"]


def test_a_started_task_sees_its_jobs_files_not_the_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINHUB_TLS_CA", "/etc/agent-own-ca.pem")
    outbox = Outbox()
    supervisor = Supervisor(outbox, tmp_path, command=FAKE_COMMAND)
    tp, seen = _run(supervisor, outbox, replace(fake_task(), tls=TLS))
    run = tp.task_dir / "run"
    assert seen == {name: str(run / f"tls-{name[13:].lower()}.pem") for name in VARIABLES}
    assert Path(seen["TRAINHUB_TLS_KEY"]).read_text() == TLS.key
    assert stat.S_IMODE(Path(seen["TRAINHUB_TLS_KEY"]).stat().st_mode) == 0o600
    # The task table (what a restarted agent adopts from) keeps no key.
    table = (tmp_path / TABLE_FILE).read_text()
    assert '"id": 31' in table and "secret-key-bytes" not in table
    assert "secret-key-bytes" not in json.dumps(tp.record.task)


def test_a_task_without_material_keeps_the_agents_own_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINHUB_TLS_CA", "/etc/agent-own-ca.pem")
    outbox = Outbox()
    supervisor = Supervisor(outbox, tmp_path, command=FAKE_COMMAND)
    _, seen = _run(supervisor, outbox, fake_task())
    assert seen == {
        "TRAINHUB_TLS_CERT": None,
        "TRAINHUB_TLS_KEY": None,
        "TRAINHUB_TLS_CA": "/etc/agent-own-ca.pem",
    }
