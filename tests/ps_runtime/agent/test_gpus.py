"""nvidia-smi parsing and discovery, from recorded outputs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ps_runtime.agent import gpus as gpus_module
from ps_runtime.agent.gpus import (
    parse_nvidia_smi,
    parse_nvidia_smi_usage,
    query_gpu_usage,
    query_gpus,
)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the nvidia-smi path, whether or not pynvml is installed."""
    monkeypatch.setattr(gpus_module, "nvml_reader", lambda: None)


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_no_devices_message_yields_no_gpus() -> None:
    assert parse_nvidia_smi(_fixture("nvidia_smi_none.txt")) == []
    assert parse_nvidia_smi("") == []


def test_eight_a100() -> None:
    gpus = parse_nvidia_smi(_fixture("nvidia_smi_8xa100.txt"))
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["model"] for g in gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert all(g["memory_mb"] == 81920 for g in gpus)
    assert gpus[0]["uuid"] == "GPU-5d7c1e4a-3b2f-9a61-0c8e-7f4b2d9e1a01"
    assert len({g["uuid"] for g in gpus}) == 8


def test_mixed_models_keep_their_own_memory() -> None:
    gpus = parse_nvidia_smi(_fixture("nvidia_smi_mixed.txt"))
    assert [(g["index"], g["model"], g["memory_mb"]) for g in gpus] == [
        (0, "NVIDIA GeForce RTX 3090", 24576),
        (1, "Tesla V100-PCIE-16GB", 16384),
        (2, "NVIDIA A100-PCIE-40GB", 40960),
    ]


def test_garbage_lines_are_skipped() -> None:
    text = "0, Tesla T4, [N/A], GPU-x\n1, Tesla T4, 15360, GPU-y\nwarning: something\n"
    assert parse_nvidia_smi(text) == [
        {"index": 1, "model": "Tesla T4", "memory_mb": 15360, "uuid": "GPU-y"}
    ]


def test_absent_nvidia_smi_yields_no_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no nvidia-smi anywhere
    assert query_gpus() == []


def _fake_nvidia_smi(directory: Path, output: str, exit_code: int) -> None:
    script = directory / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat <<'OUT'\n{output}OUT\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_query_runs_nvidia_smi_from_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_nvidia_smi(tmp_path, _fixture("nvidia_smi_mixed.txt"), 0)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert [g["model"] for g in query_gpus()][1] == "Tesla V100-PCIE-16GB"


def test_failing_nvidia_smi_yields_no_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Driver installed but no device: nvidia-smi prints this and exits 6.
    _fake_nvidia_smi(tmp_path, _fixture("nvidia_smi_none.txt"), 6)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert query_gpus() == []


def test_current_query_a100_facts_and_usage() -> None:
    text = _fixture("nvidia_smi_query_4xa100.txt")
    gpus = parse_nvidia_smi(text)
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert {(g["model"], g["memory_mb"]) for g in gpus} == {("NVIDIA A100-SXM4-80GB", 81920)}
    assert gpus[3]["uuid"] == "GPU-c41e7b92-0f3d-8a56-1b7c-9d2e5f0a4c34"
    assert parse_nvidia_smi_usage(text)[:2] == [
        {"index": 0, "utilization_percent": 87.0, "memory_used_mb": 61234},
        {"index": 1, "utilization_percent": 91.0, "memory_used_mb": 61190},
    ]


def test_current_query_h100_with_unsupported_usage() -> None:
    text = _fixture("nvidia_smi_query_2xh100.txt")
    assert [(g["index"], g["model"], g["memory_mb"]) for g in parse_nvidia_smi(text)] == [
        (0, "NVIDIA H100 80GB HBM3", 81559),
        (1, "NVIDIA H100 80GB HBM3", 81559),
    ]
    # The second GPU reports [N/A]: its facts stay, its usage is left out.
    assert parse_nvidia_smi_usage(text) == [
        {"index": 0, "utilization_percent": 42.0, "memory_used_mb": 20480}
    ]


def test_older_query_has_no_usage() -> None:
    assert parse_nvidia_smi_usage(_fixture("nvidia_smi_8xa100.txt")) == []


def test_usage_runs_nvidia_smi_from_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_nvidia_smi(tmp_path, _fixture("nvidia_smi_query_4xa100.txt"), 0)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert [u["utilization_percent"] for u in query_gpu_usage()] == [87.0, 91.0, 0.0, 0.0]
