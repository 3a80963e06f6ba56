"""The runtime version an agent reports: where it is read, what is allowed, where it goes."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

from ps_runtime import version
from ps_runtime.agent import cli
from ps_runtime.agent.daemon import Agent
from ps_runtime.agent.facts import NodeFacts, gather_facts
from ps_runtime.agent.state import AgentState
from ps_runtime.version import check_version, known_runtime_version, runtime_version

REPO = Path(__file__).resolve().parents[2]
PROJECT_VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_from_a_source_tree_the_version_is_the_pyproject_one() -> None:
    assert version.source_root() == REPO
    assert runtime_version() == PROJECT_VERSION
    assert known_runtime_version() == PROJECT_VERSION
    assert cli.runtime_version() == PROJECT_VERSION


def test_installed_the_version_is_the_distribution_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version, "source_root", lambda: None)
    asked: list[str] = []

    def installed(name: str) -> str:
        asked.append(name)
        return "9.8.7"

    monkeypatch.setattr(importlib.metadata, "version", installed)
    assert runtime_version() == "9.8.7"
    assert asked == ["trainhub-runtime"]


def test_a_bare_copy_has_no_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version, "source_root", lambda: None)

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        runtime_version()
    assert known_runtime_version() is None
    assert cli.runtime_version() == "unknown"
    assert "agent_version" not in gather_facts(address="10.0.0.1").as_enroll_body("t")


@pytest.mark.parametrize("text", ["0.1.0", "1.2.0rc1", "0.1.0+g1a2b3c", "1!2.0.post1", "v2"])
def test_versions_that_pass(text: str) -> None:
    assert check_version(text) == text


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "must not be empty"),
        (" 0.1.0", "such as 0.1.0"),
        ("0.1.0\n", "such as 0.1.0"),
        (".1", "such as 0.1.0"),
        ("0.1/0", "such as 0.1.0"),
        ("1" * 65, "at most 64 characters"),
    ],
)
def test_versions_that_are_refused_say_why(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        check_version(text)


def test_the_enroll_facts_carry_the_version() -> None:
    facts = gather_facts(address="10.0.0.1")
    assert facts.agent_version == PROJECT_VERSION
    assert facts.as_enroll_body("t")["agent_version"] == PROJECT_VERSION
    bare = NodeFacts(hostname="n", address="a", cpus=1, memory_mb=1)
    assert "agent_version" not in bare.as_enroll_body("t")


def test_every_heartbeat_carries_the_version_the_agent_started_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent(AgentState("http://127.0.0.1:1", 7, "c"), tmp_path / "work")
    assert agent._heartbeat().to_wire()["agent_version"] == PROJECT_VERSION
    # An upgrade in place changes the files, not the running process: it says so until
    # it is restarted.
    monkeypatch.setattr(version, "runtime_version", lambda: "9.9.9")
    assert agent._heartbeat().agent_version == PROJECT_VERSION
