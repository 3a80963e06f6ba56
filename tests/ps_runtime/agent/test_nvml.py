"""The NVML reader over recorded `pynvml` return values (no GPU needed)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.agent import gpus, nvml

FIXTURES = Path(__file__).parent / "fixtures"


class NVMLError(Exception):
    pass


class FakeNvml:
    """A stand-in for the `pynvml` module, answering from a recorded JSON fixture."""

    NVMLError = NVMLError

    def __init__(self, recorded: dict[str, Any], *, init_fails: bool = False) -> None:
        self._devices = recorded["devices"]
        self._bytes = bool(recorded.get("bytes_strings"))
        self._init_fails = init_fails
        self.initialised = False

    def _str(self, text: str) -> str | bytes:
        return text.encode() if self._bytes else text

    def nvmlInit(self) -> None:
        if self._init_fails:
            raise NVMLError("NVML Shared Library Not Found")
        self.initialised = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self._devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        return dict(self._devices[index])

    def nvmlDeviceGetName(self, handle: dict[str, Any]) -> str | bytes:
        return self._str(handle["name"])

    def nvmlDeviceGetUUID(self, handle: dict[str, Any]) -> str | bytes:
        return self._str(handle["uuid"])

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> types.SimpleNamespace:
        return types.SimpleNamespace(**handle["memory"])

    def nvmlDeviceGetUtilizationRates(self, handle: dict[str, Any]) -> types.SimpleNamespace:
        if handle.get("utilization") is None:
            raise NVMLError("Not Supported")
        return types.SimpleNamespace(**handle["utilization"])


def _recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def test_a100_facts_and_usage() -> None:
    reader = nvml.NvmlReader(FakeNvml(_recorded("nvml_2xa100.json")))
    assert reader.gpus() == [
        {
            "index": 0,
            "model": "NVIDIA A100-SXM4-40GB",
            "memory_mb": 40960,
            "uuid": "GPU-4f1c8e2a-9d3b-47e6-a0c5-2b8e7d1f6a90",
        },
        {
            "index": 1,
            "model": "NVIDIA A100-SXM4-40GB",
            "memory_mb": 40960,
            "uuid": "GPU-b72d0e5c-1a8f-4c93-8e6b-5d2f9a0c3e81",
        },
    ]
    assert reader.usage() == [
        {"index": 0, "utilization_percent": 73.0, "memory_used_mb": 16384},
        {"index": 1, "utilization_percent": 0.0, "memory_used_mb": 4},
    ]


def test_h100_with_bytes_strings() -> None:
    reader = nvml.NvmlReader(FakeNvml(_recorded("nvml_3xh100.json")))
    facts = reader.gpus()
    assert [g["model"] for g in facts] == ["NVIDIA H100 80GB HBM3"] * 3
    assert {g["memory_mb"] for g in facts} == {81559}
    assert facts[2]["uuid"] == "GPU-17c6d4a8-5e0b-4b2f-93d1-6a8e2c4f0b53"
    assert [(u["utilization_percent"], u["memory_used_mb"]) for u in reader.usage()] == [
        (42.0, 20480),
        (3.0, 531),
        (0.0, 531),
    ]


def test_a_gpu_without_utilization_is_left_out_of_usage_only() -> None:
    recorded = _recorded("nvml_3xh100.json")
    recorded["devices"][1]["utilization"] = None  # NVML_ERROR_NOT_SUPPORTED, as under MIG
    reader = nvml.NvmlReader(FakeNvml(recorded))
    assert len(reader.gpus()) == 3
    assert [u["index"] for u in reader.usage()] == [0, 2]


def test_load_without_pynvml_is_none() -> None:
    assert nvml.load("trainhub_no_such_nvml_module") is None


def test_load_with_failing_init_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(_recorded("nvml_2xa100.json"), init_fails=True)
    monkeypatch.setitem(sys.modules, "fake_pynvml", fake)
    assert nvml.load("fake_pynvml") is None


def test_load_initialises(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(_recorded("nvml_3xh100.json"))
    monkeypatch.setitem(sys.modules, "fake_pynvml", fake)
    reader = nvml.load("fake_pynvml")
    assert reader is not None and fake.initialised
    assert len(reader.gpus()) == 3


def test_query_prefers_nvml_over_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "run_nvidia_smi", lambda binary="": pytest.fail("ran nvidia-smi"))
    reader = nvml.NvmlReader(FakeNvml(_recorded("nvml_2xa100.json")))
    assert [g["index"] for g in gpus.query_gpus(reader=reader)] == [0, 1]
    assert gpus.query_gpu_usage(reader=reader)[0]["utilization_percent"] == 73.0


def test_nvml_failing_midway_falls_back_to_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise NVMLError("GPU is lost")

    smi = (FIXTURES / "nvidia_smi_query_2xh100.txt").read_text()
    monkeypatch.setattr(gpus, "run_nvidia_smi", lambda binary="": smi)
    reader = nvml.NvmlReader(Broken(_recorded("nvml_2xa100.json")))
    assert [g["model"] for g in gpus.query_gpus(reader=reader)] == ["NVIDIA H100 80GB HBM3"] * 2
