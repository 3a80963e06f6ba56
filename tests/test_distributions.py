"""A node installs only `trainhub-runtime`: its wheel alone gives a working agent and
launcher, and no Django (docs/design.md §1, "Two distributions")."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # A clean environment: nothing from this checkout or its virtualenv may leak in.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the runtime wheel (built from this checkout) installed."""
    work = tmp_path_factory.mktemp("runtime")
    wheels = work / "wheels"
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", wheels, ROOT, cwd=work)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("trainhub_runtime-*.whl")
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=True, clear=True)
    installed = _run(env_dir / "bin" / "python", "-m", "pip", "install", "-q", wheel, cwd=work)
    assert installed.returncode == 0, installed.stderr
    return env_dir


def test_runtime_wheel_installs_no_control_plane(runtime_venv: Path, tmp_path: Path) -> None:
    python = runtime_venv / "bin" / "python"
    # torch comes only with the `torch` extra (docs/design.md "PyTorch on the PS").
    for module in ("django", "celery", "channels", "trainhub", "torch"):
        probe = _run(python, "-c", f"import {module}", cwd=tmp_path)
        assert probe.returncode != 0, f"{module} is importable from the runtime alone"
        assert "ModuleNotFoundError" in probe.stderr
    where = _run(python, "-c", "import ps_runtime; print(ps_runtime.__file__)", cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert str(runtime_venv) in where.stdout  # the installed copy, not this checkout


def test_runtime_wheel_brings_uv(runtime_venv: Path, tmp_path: Path) -> None:
    """The agent builds job environments with uv: a plain dependency of the runtime."""
    uv = _run(runtime_venv / "bin" / "uv", "--version", cwd=tmp_path)
    assert uv.returncode == 0 and uv.stdout.startswith("uv "), uv.stderr


def test_runtime_wheel_offers_torch_as_an_extra(runtime_venv: Path, tmp_path: Path) -> None:
    """PyTorch is the `torch` extra, installed only when asked for."""
    probe = _run(
        runtime_venv / "bin" / "python",
        "-c",
        "import importlib.metadata as m; d = m.metadata('trainhub-runtime');"
        " print(d.get_all('Provides-Extra')); print(d.get_all('Requires-Dist'))",
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    extras, requires = probe.stdout.splitlines()
    assert "'torch'" in extras
    assert 'torch>=2.1; extra == "torch"' in requires


def test_runtime_wheel_has_the_archive_checks(runtime_venv: Path, tmp_path: Path) -> None:
    """The agent scans code archives with `ps_runtime.archives`, a package of several
    modules: the wheel ships all of them."""
    probe = _run(
        runtime_venv / "bin" / "python",
        "-c",
        "from ps_runtime.archives import (DIGEST_PREFIX, TooLarge, UnsafeArchive,"
        " copy_hashing, extract, is_digest, make_writable, scan, sha256_file);"
        " import ps_runtime.archives as a; print(a.__file__)",
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    assert str(runtime_venv) in probe.stdout


def test_runtime_wheel_has_every_runtime_package(runtime_venv: Path, tmp_path: Path) -> None:
    """The runtime is one package per concern (docs/design.md "Runtime": client, server,
    coordinator, launch, wire, shards, ...): the wheel ships every module of the checkout's
    `ps_runtime/`, and the packages import from the installed copy."""
    packages = sorted(
        p.name for p in (ROOT / "ps_runtime").iterdir() if (p / "__init__.py").is_file()
    )
    assert {"client", "coordinator", "launch", "server", "shards", "wire"} <= set(packages)
    # Without the torch extra, ps_runtime.pytorch ships but says what to install.
    packages.remove("pytorch")
    probe = _run(
        runtime_venv / "bin" / "python",
        "-c",
        "import importlib, sys, ps_runtime;"
        " [importlib.import_module('ps_runtime.' + n) for n in sys.argv[1:]];"
        " print(ps_runtime.__file__)",
        *packages,
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    installed = Path(probe.stdout.strip()).parent
    assert str(runtime_venv) in str(installed)

    def modules(root: Path) -> set[str]:
        return {
            str(p.relative_to(root)) for p in root.rglob("*.py") if "__pycache__" not in p.parts
        }

    assert modules(ROOT / "ps_runtime") <= modules(installed)
    adapter = _run(runtime_venv / "bin" / "python", "-c", "import ps_runtime.pytorch", cwd=tmp_path)
    assert adapter.returncode != 0
    assert "install trainhub-runtime[torch]" in adapter.stderr


def test_runtime_wheel_agent_cli_works(runtime_venv: Path, tmp_path: Path) -> None:
    agent = _run(runtime_venv / "bin" / "trainhub-agent", "--help", cwd=tmp_path)
    assert agent.returncode == 0, agent.stderr
    assert "enroll" in agent.stdout and "run" in agent.stdout
    # Enrolling against a server that is not there fails with a message, not a traceback.
    enroll = _run(
        runtime_venv / "bin" / "trainhub-agent",
        "enroll",
        "--server",
        "http://127.0.0.1:9",
        "--token=nothing",
        "--state-file",
        tmp_path / "agent.json",
        cwd=tmp_path,
        timeout=60,
    )
    assert enroll.returncode != 0
    assert "Traceback" not in enroll.stderr, enroll.stderr


def test_runtime_wheel_launches_a_local_job(runtime_venv: Path, tmp_path: Path) -> None:
    """`python -m ps_runtime.launch` trains the built-in MovieLens model on generated
    ratings with a PS shard and a worker, from the installed wheel alone."""
    launched = _run(
        runtime_venv / "bin" / "python",
        "-m",
        "ps_runtime.launch",
        "--ps",
        "1",
        "--workers",
        "1",
        "ps_runtime.examples.movielens:train",
        "--",
        "--epochs",
        "1",
        cwd=tmp_path,
        timeout=300,
    )
    assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-2000:]
    assert "test_rmse" in launched.stdout + launched.stderr
