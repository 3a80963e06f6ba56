"""The node's job environments (`environments`, `uvrun`, `envspec`): built with the real uv
from a local wheelhouse (no network), shared by digest, evicted to their budget, ended at
their timeout, and never fed an option or a path by a requirement line."""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.agent.environments import EnvironmentBuildError, EnvironmentCache
from ps_runtime.agent.envspec import JobEnvironment, requirement_problem, requirements_from_text
from ps_runtime.agent.fields import JsonObject, ProtocolError
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.agent.uvrun import pip_settings, uv_environment

from .helpers import FAKE_COMMAND, fake_task, statuses, wait_for
from .wheels import make_wheel, offline_index

MIB = 1024 * 1024


def cache(tmp_path: Path, wheelhouse: Path, **environ: str) -> EnvironmentCache:
    return EnvironmentCache(
        tmp_path / "envs",
        python=sys.executable,
        pythonpath=[],
        environ={"PATH": "/usr/bin:/bin", **offline_index(wheelhouse), **environ},
    )


def test_one_build_per_digest_even_when_asked_at_once(tmp_path: Path) -> None:
    make_wheel(tmp_path / "wheels", "alpha")
    envs = cache(tmp_path, tmp_path / "wheels")
    spec = JobEnvironment(("alpha",))
    lines: list[str] = []
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(envs.build(spec, lines.append)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and envs.ready(spec) == results[0]
    assert sum(line.startswith("Creating virtual environment") for line in lines) == 1
    assert sum("ready (built before)" in line for line in lines) == 2
    # The digest ignores order and surrounding spaces, not the packages or the Python.
    assert envs.digest(JobEnvironment((" alpha ",))) == envs.digest(spec)
    assert envs.digest(JobEnvironment(("alpha", "beta"))) != envs.digest(spec)
    assert envs.digest(JobEnvironment(("alpha",), python="3.99")) != envs.digest(spec)


def test_eviction_keeps_the_cache_under_its_budget_least_recently_used_first(
    tmp_path: Path,
) -> None:
    wheels = tmp_path / "wheels"
    for name in ("one", "two", "three"):
        make_wheel(wheels, name, payload_bytes=int(1.2 * MIB))
    envs = cache(tmp_path, wheels, TRAINHUB_ENV_BUDGET_MB="3")
    specs = {name: JobEnvironment((name,)) for name in ("one", "two", "three")}
    built = {name: envs.build(spec, lambda _: None).name for name, spec in specs.items()}
    kept = {digest for _, digest, _ in envs.environments()}
    # Two fit in 3 MiB, three do not: the oldest went.
    assert kept == {built["two"], built["three"]}
    assert sum(size for *_, size in envs.environments()) <= envs.budget
    # Using one makes it the most recent: the next build evicts the other.
    time.sleep(0.01)
    assert envs.ready(specs["two"]) is not None
    make_wheel(wheels, "four", payload_bytes=int(1.2 * MIB))
    four = envs.build(JobEnvironment(("four",)), lambda _: None).name
    assert {d for _, d, _ in envs.environments()} == {built["two"], four}
    # An environment in use is never evicted, even over the budget.
    envs.build(specs["one"], lambda _: None, in_use={built["two"], four})
    assert {d for _, d, _ in envs.environments()} == {built["one"], built["two"], four}


def test_a_failed_build_says_which_requirement_and_why(tmp_path: Path) -> None:
    make_wheel(tmp_path / "wheels", "alpha", "1.0")
    envs = cache(tmp_path, tmp_path / "wheels")
    with pytest.raises(EnvironmentBuildError) as failed:
        envs.build(JobEnvironment(("alpha>=2",)), lambda _: None)
    assert "requirement 'alpha>=2'" in str(failed.value)
    assert "alpha>=2" in str(failed.value).split(":", 2)[-1]  # uv's own reason follows
    assert envs.environments() == []


@pytest.fixture
def silent_index() -> Iterator[str]:
    """An HTTP "index" that accepts connections and never answers (a hanging mirror)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/simple"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def hanging(tmp_path: Path, index: str) -> EnvironmentCache:
    """Environments from `index` alone (one that never answers), longer than uv's own
    HTTP timeout would allow."""
    return EnvironmentCache(
        tmp_path / "envs",
        python=sys.executable,
        pythonpath=[],
        environ={
            "PATH": "/usr/bin:/bin",
            "UV_INDEX_URL": index,
            "UV_HTTP_TIMEOUT": "300",
            "PIP_CONFIG_FILE": os.devnull,
        },
    )


def test_a_build_that_hangs_ends_at_its_timeout(tmp_path: Path, silent_index: str) -> None:
    envs = hanging(tmp_path, silent_index)
    started = time.monotonic()
    with pytest.raises(EnvironmentBuildError, match="did not finish within its timeout"):
        envs.build(JobEnvironment(("alpha",), timeout_seconds=10), lambda _: None)
    assert 9 < time.monotonic() - started < 30
    assert envs.environments() == []


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("--index-url https://evil.example/simple", "is an option"),
        ("-e /etc", "is an option"),
        ("-r /etc/shadow", "is an option"),
        ("pkg @ https://evil.example/pkg.whl", "direct reference or a path"),
        ("pkg @ file:///etc/passwd", "direct reference or a path"),
        ("./local/dir", "direct reference or a path"),
        ("torch; import os", "not a requirement"),
        ("", "is empty"),
        ("x" * 201, "longer than 200"),
    ],
)
def test_requirement_lines_that_are_not_requirements_are_refused(line: str, says: str) -> None:
    problem = requirement_problem(line)
    assert problem is not None and says in problem
    with pytest.raises(ProtocolError, match=r"environment\.requirements\[0\]"):
        JobEnvironment.from_fields(JsonObject({"requirements": [line]}, "environment"))


@pytest.mark.parametrize(
    "line",
    [
        "torch",
        "torch>=2.3",
        "numpy==1.26.*",
        "pandas[performance]==2.2.2",
        "scikit-learn >=1.4, <2",
        'tomli; python_version < "3.11"',
        "Django~=5.2",
    ],
)
def test_requirements_people_write_are_accepted(line: str) -> None:
    assert requirement_problem(line) is None


def test_a_requirements_file_loses_comments_and_blank_lines() -> None:
    text = "# pinned\ntorch>=2.3  # the model\n\nnumpy\n"
    assert requirements_from_text(text) == ["torch>=2.3", "numpy"]


def test_uv_gets_the_nodes_index_settings_and_nothing_else(tmp_path: Path) -> None:
    env = uv_environment(
        {
            "PATH": "/usr/bin",
            "PIP_FIND_LINKS": "/opt/wheels /srv/wheels",
            "PIP_INDEX_URL": "https://mirror.example/simple",
            "UV_EXTRA_INDEX_URL": "https://extra.example/simple",
            "https_proxy": "http://proxy:3128",
            "TRAINHUB_SECRET_KEY": "never",
            "DATABASE_URL": "postgres://u:p@db/x",
        },
        tmp_path,
    )
    assert env["UV_FIND_LINKS"] == "/opt/wheels,/srv/wheels"
    assert env["UV_INDEX_URL"] == "https://mirror.example/simple"
    assert env["UV_EXTRA_INDEX_URL"] == "https://extra.example/simple"
    assert env["https_proxy"] == "http://proxy:3128"
    assert env["UV_CACHE_DIR"] == str(tmp_path)
    assert "TRAINHUB_SECRET_KEY" not in env and "DATABASE_URL" not in env


def test_pips_configuration_files_are_the_nodes_index_settings_too(tmp_path: Path) -> None:
    site = tmp_path / "pip.conf"
    site.write_text(
        "[global]\nfind-links = /opt/wheels\nextra-index-url = file:///a/simple\n"
        "  file:///b/simple\nconstraint = /etc/pins.txt\ntimeout = 60\n"
    )
    user = tmp_path / "user.conf"
    user.write_text("[install]\nindex-url = https://mirror.example/simple\n")
    settings = pip_settings({"PIP_FIND_LINKS": "/srv/wheels"}, [site, user])
    assert settings == {
        "PIP_FIND_LINKS": "/srv/wheels",  # the variable wins over the file
        "PIP_EXTRA_INDEX_URL": "file:///a/simple file:///b/simple",
        "PIP_CONSTRAINT": "/etc/pins.txt",
        "PIP_INDEX_URL": "https://mirror.example/simple",
    }
    env = uv_environment({"UV_CONSTRAINT": "/mine.txt"}, tmp_path, [site, user])
    assert env["UV_EXTRA_INDEX_URL"] == "file:///a/simple file:///b/simple"
    assert env["UV_FIND_LINKS"] == "/opt/wheels"
    assert env["UV_CONSTRAINT"] == "/mine.txt"  # uv's own setting is not replaced
    assert pip_settings({"PIP_CONFIG_FILE": os.devnull}) == {}


def test_a_task_stopped_while_its_environment_builds_never_starts(
    tmp_path: Path, silent_index: str
) -> None:
    envs = hanging(tmp_path, silent_index)
    outbox = Outbox()
    supervisor = Supervisor(outbox, tmp_path / "work", command=FAKE_COMMAND, environments=envs)
    task = dataclasses.replace(fake_task(), environment=JobEnvironment(("alpha",)))
    try:
        assert supervisor.start(task) is None
        assert task.key in supervisor.live_keys()  # waiting counts as live
        sent: list[dict[str, Any]] = []

        def drained() -> list[tuple[int, int, str]]:
            sent.extend(m.to_wire() for m in outbox.drain())
            return statuses(sent)

        wait_for(drained, 10)
        assert statuses(sent)[0] == (task.id, task.attempt, "preparing")
        supervisor.stop(task.key)
        assert task.key not in supervisor.live_keys() and task.key in supervisor.finished_keys()
        sent.extend(m.to_wire() for m in outbox.drain())
        assert statuses(sent)[-1] == (task.id, task.attempt, "stopped")
    finally:
        supervisor.stop_all(grace=0.5)  # ends the build (uv is killed)
    assert supervisor.get(task.key) is None  # never started
