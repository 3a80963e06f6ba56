"""GPU facts and usage through NVML (`pynvml`, from the `nvidia-ml-py` package).

`pynvml` is optional (the runtime's `gpu` extra): it is imported on first use, and a
missing module or a failing `nvmlInit` (no driver) mean "no NVML", so the caller falls
back to `nvidia-smi`. `NvmlReader` takes the module as an argument, so tests feed it
recorded values without a GPU.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from ps_runtime.agent.gpus import GpuInfo, GpuUsage

logger = logging.getLogger(__name__)

MIB = 1024 * 1024


def _text(value: object) -> str:
    """NVML strings are `bytes` in old bindings and `str` in new ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """Reads every GPU through an initialised NVML module (`pynvml` or a stand-in)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    def _handles(self) -> list[tuple[int, Any]]:
        count = int(self._nvml.nvmlDeviceGetCount())
        return [(i, self._nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]

    def gpus(self) -> list[GpuInfo]:
        """Index, model, total memory (MiB) and UUID of each GPU."""
        return [
            GpuInfo(
                index=index,
                model=_text(self._nvml.nvmlDeviceGetName(handle)),
                memory_mb=int(self._nvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB,
                uuid=_text(self._nvml.nvmlDeviceGetUUID(handle)),
            )
            for index, handle in self._handles()
        ]

    def usage(self) -> list[GpuUsage]:
        """Utilization (percent of the last sample period) and memory in use of each GPU;
        a GPU that cannot say (NVML_ERROR_NOT_SUPPORTED, e.g. under MIG) is left out."""
        usage: list[GpuUsage] = []
        for index, handle in self._handles():
            try:
                rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except self._nvml.NVMLError as exc:
                logger.debug("no usage for GPU %d: %s", index, exc)
                continue
            usage.append(
                GpuUsage(
                    index=index,
                    utilization_percent=float(rates.gpu),
                    memory_used_mb=int(memory.used) // MIB,
                )
            )
        return usage


def load(module: str = "pynvml") -> NvmlReader | None:
    """A reader over the initialised NVML, or None when it is not installed or fails."""
    try:
        nvml = importlib.import_module(module)
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError: no driver, no device, driver mismatch
        logger.info("NVML is not usable (%s); using nvidia-smi", exc)
        return None
    return NvmlReader(nvml)
