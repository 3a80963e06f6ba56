"""The task environment (docs/protocol.md §2): one module builds and reads it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ps_runtime import taskenv
from ps_runtime.taskenv import ClusterSpec, Role, TaskEnvError, TaskEnvironment

CLUSTER = ClusterSpec(ps=("10.0.0.1:4000",), worker=("10.0.0.2:4001", "10.0.0.3:4002"))


COORDINATOR = TaskEnvironment(
    role=Role.COORDINATOR,
    job_token="tok",
    job_id="12",
    task_id="33",
    cluster=CLUSTER,
    checkpoint_dir="/ckpt/job-12",
    entrypoint="ps_runtime.examples.movielens:train",
    args={"epochs": 2, "data": "u.data"},
    checkpoint_every_seconds=300.0,
)
PS = TaskEnvironment(role=Role.PS, job_token="tok", index=1, bind="10.0.0.1:4000", cluster=CLUSTER)


def _coordinator(**change: Any) -> TaskEnvironment:
    return replace(COORDINATOR, **change)


def _ps(**change: Any) -> TaskEnvironment:
    return replace(PS, **change)


@pytest.mark.parametrize(
    "env",
    [
        _coordinator(),
        _coordinator(args={}, checkpoint_every_seconds=0.5, startup_timeout_seconds=1.0),
        _coordinator(cluster_file="/w/cluster.json", metrics_fd=7, checkpoint_dir=None),
        _ps(),
        _ps(cluster=None, checkpoint_dir="/c"),
        _ps(role=Role.WORKER, index=0),
    ],
)
def test_round_trip(env: TaskEnvironment) -> None:
    variables = env.to_env()
    assert all(isinstance(v, str) and v for v in variables.values())
    assert TaskEnvironment.from_env(variables) == env


def test_written_as_the_control_plane_always_wrote_it() -> None:
    env = _coordinator().to_env()
    assert env == {
        "TRAINHUB_JOB_ID": "12",
        "TRAINHUB_TASK_ID": "33",
        "TRAINHUB_ROLE": "coordinator",
        "TRAINHUB_TASK_INDEX": "0",
        "TRAINHUB_CLUSTER": json.dumps(
            {"ps": ["10.0.0.1:4000"], "worker": ["10.0.0.2:4001", "10.0.0.3:4002"]}
        ),
        "TRAINHUB_JOB_TOKEN": "tok",
        "TRAINHUB_CHECKPOINT_DIR": "/ckpt/job-12",
        "TRAINHUB_ENTRYPOINT": "ps_runtime.examples.movielens:train",
        "TRAINHUB_ARGS": json.dumps({"epochs": 2, "data": "u.data"}),
        "TRAINHUB_CHECKPOINT_EVERY_SECONDS": "300",
    }
    assert _coordinator(args={}).to_env()["TRAINHUB_ARGS"] == "{}"  # always for a coordinator
    assert "TRAINHUB_ARGS" not in _ps().to_env()


def test_every_variable_name_is_a_trainhub_variable() -> None:
    names = [v.name for v in taskenv.VARIABLES]
    assert len(names) == len(set(names)) and all(n.startswith("TRAINHUB_") for n in names)


def test_empty_counts_as_unset() -> None:
    env = {**_ps().to_env(), "TRAINHUB_CHECKPOINT_DIR": "", "TRAINHUB_TASK_INDEX": ""}
    read = TaskEnvironment.from_env(env)
    assert read.checkpoint_dir is None and read.index == 0


@pytest.mark.parametrize(
    ("drop", "role"),
    [
        ("TRAINHUB_ROLE", Role.PS),
        ("TRAINHUB_JOB_TOKEN", Role.PS),
        ("TRAINHUB_BIND", Role.PS),
        ("TRAINHUB_BIND", Role.WORKER),
        ("TRAINHUB_ENTRYPOINT", Role.COORDINATOR),
        ("TRAINHUB_CLUSTER", Role.COORDINATOR),
        ("TRAINHUB_JOB_TOKEN", Role.COORDINATOR),
    ],
)
def test_missing_variable_is_named(drop: str, role: Role) -> None:
    env = (_coordinator() if role == Role.COORDINATOR else _ps(role=role)).to_env()
    del env[drop]
    with pytest.raises(TaskEnvError, match=f"^{drop} is not set; "):
        TaskEnvironment.from_env(env)


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("TRAINHUB_ROLE", "chief", "TRAINHUB_ROLE='chief' is not a role"),
        ("TRAINHUB_TASK_INDEX", "-1", "TRAINHUB_TASK_INDEX='-1' must be a non-negative integer"),
        ("TRAINHUB_TASK_INDEX", "one", "TRAINHUB_TASK_INDEX='one'"),
        ("TRAINHUB_CLUSTER", "{", "TRAINHUB_CLUSTER is not valid JSON"),
        ("TRAINHUB_CLUSTER", "[]", "TRAINHUB_CLUSTER must be a JSON object"),
        ("TRAINHUB_CLUSTER", '{"ps": "h:1"}', "TRAINHUB_CLUSTER: 'ps' must be a list"),
        ("TRAINHUB_CLUSTER", '{"worker": [1]}', "TRAINHUB_CLUSTER: 'worker' must be a list"),
        ("TRAINHUB_ARGS", "[1]", "TRAINHUB_ARGS must be a JSON object of keyword arguments"),
        ("TRAINHUB_ARGS", "{", "TRAINHUB_ARGS is not valid JSON"),
        ("TRAINHUB_ENTRYPOINT", "train", "TRAINHUB_ENTRYPOINT='train' must look like"),
        ("TRAINHUB_BIND", "localhost", "TRAINHUB_BIND='localhost' must look like host:port"),
        ("TRAINHUB_CHECKPOINT_EVERY_SECONDS", "5m", "TRAINHUB_CHECKPOINT_EVERY_SECONDS='5m'"),
        ("TRAINHUB_CHECKPOINT_EVERY_SECONDS", "inf", "non-negative number of seconds"),
        ("TRAINHUB_CHECKPOINT_EVERY_SECONDS", "nan", "non-negative number of seconds"),
        ("TRAINHUB_STARTUP_TIMEOUT", "-3", "TRAINHUB_STARTUP_TIMEOUT='-3'"),
        ("TRAINHUB_METRICS_FD", "x", "TRAINHUB_METRICS_FD='x' must be a non-negative integer"),
    ],
)
def test_malformed_variable_is_named(name: str, value: str, said: str) -> None:
    env = {**_coordinator(bind="h:1").to_env(), name: value}
    with pytest.raises(TaskEnvError) as info:
        TaskEnvironment.from_env(env)
    assert said in str(info.value)


# Twelve in Arabic-Indic and fullwidth digits, and a superscript two.
@pytest.mark.parametrize("digits", ["\u0661\u0662", "\uff11\uff12", "\u00b2"])
@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("TRAINHUB_TASK_INDEX", "{}", "must be a non-negative integer"),
        ("TRAINHUB_METRICS_FD", "{}", "must be a non-negative integer"),
        ("TRAINHUB_BIND", "h:{}", "must look like host:port"),
        ("TRAINHUB_CHECKPOINT_EVERY_SECONDS", "{}", "must be a non-negative number of seconds"),
        ("TRAINHUB_STARTUP_TIMEOUT", "1{}.5", "must be a non-negative number of seconds"),
    ],
)
def test_numbers_are_ascii_digits(name: str, value: str, said: str, digits: str) -> None:
    # str.isdigit(), int() and float() take these too: read as 12, or a bare ValueError.
    text = value.format(digits)
    env = {**_coordinator(bind="h:1").to_env(), name: text}
    with pytest.raises(TaskEnvError) as info:
        TaskEnvironment.from_env(env)
    assert f"{name}={text!r} {said}" in str(info.value)


def test_library_reads_go_through_the_same_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ps_runtime.coordinator.cluster import ClusterResolver
    from ps_runtime.wire import rpc

    for variable in taskenv.VARIABLES:
        monkeypatch.delenv(variable.name, raising=False)
    with pytest.raises(TaskEnvError, match="TRAINHUB_JOB_TOKEN is not set"):
        rpc.token_from_env()
    assert rpc.TLSFiles.from_env() is None
    monkeypatch.setenv("TRAINHUB_CLUSTER", CLUSTER.to_json())
    monkeypatch.setenv("TRAINHUB_JOB_TOKEN", "tok")
    monkeypatch.setenv("TRAINHUB_TLS_CA", str(tmp_path / "ca.pem"))
    resolver = ClusterResolver()
    assert (resolver.ps, resolver.workers, resolver.token) == (CLUSTER.ps, CLUSTER.worker, "tok")
    assert rpc.TLSFiles.from_env() == rpc.TLSFiles(ca=str(tmp_path / "ca.pem"))


def test_exit_codes() -> None:
    assert taskenv.EXIT_PS_LOST == 75
    assert taskenv.EXIT_STOPPED_AFTER_CHECKPOINT == 0
    assert taskenv.EXIT_TERMINATED == 143
