"""GPU discovery and usage: NVML first (`ps_runtime.agent.nvml`), `nvidia-smi` otherwise."""

from __future__ import annotations

import csv
import logging
import shutil
import subprocess
import threading
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from ps_runtime.agent.nvml import NvmlReader

logger = logging.getLogger(__name__)

NVIDIA_SMI_ARGS = (
    "--query-gpu=index,uuid,name,memory.total,utilization.gpu,memory.used",
    "--format=csv,noheader,nounits",
)


class GpuInfo(TypedDict):
    """A GPU's facts, sent at enrollment."""

    index: int
    model: str
    memory_mb: int
    uuid: str


class GpuUsage(TypedDict):
    """A GPU's load, sent in every heartbeat."""

    index: int
    utilization_percent: float
    memory_used_mb: int


def _number(text: str) -> float:
    """A numeric nvidia-smi field; `[N/A]`, `[Not Supported]` and the like raise ValueError."""
    return float(text)


def _rows(output: str) -> list[tuple[GpuInfo, GpuUsage | None]]:
    """Rows of the current query (6 fields) or of the older one (`index,name,memory.total,
    uuid`, 4 fields, no usage). Rows that are neither (such as "No devices were found")
    or whose index or memory is not a number are skipped."""
    rows: list[tuple[GpuInfo, GpuUsage | None]] = []
    for row in csv.reader(output.splitlines(), skipinitialspace=True):
        fields = [field.strip() for field in row]
        try:
            if len(fields) == 6:
                index, uuid, name, total, util, used = fields
                info = GpuInfo(
                    index=int(index), model=name, memory_mb=int(_number(total)), uuid=uuid
                )
                usage: GpuUsage | None = None
                try:
                    usage = GpuUsage(
                        index=info["index"],
                        utilization_percent=_number(util),
                        memory_used_mb=int(_number(used)),
                    )
                except ValueError:  # facts without usage (e.g. utilization not supported)
                    pass
                rows.append((info, usage))
            elif len(fields) == 4:
                index, name, total, uuid = fields
                info = GpuInfo(
                    index=int(index), model=name, memory_mb=int(_number(total)), uuid=uuid
                )
                rows.append((info, None))
        except ValueError:
            continue
    return sorted(rows, key=lambda r: r[0]["index"])


def parse_nvidia_smi(output: str) -> list[GpuInfo]:
    """The GPUs in `nvidia-smi --query-gpu=… --format=csv,noheader,nounits` output."""
    return [info for info, _ in _rows(output)]


def parse_nvidia_smi_usage(output: str) -> list[GpuUsage]:
    """The per-GPU usage in the same output (GPUs whose usage is `[N/A]` are left out)."""
    return [usage for _, usage in _rows(output) if usage is not None]


def run_nvidia_smi(binary: str = "nvidia-smi", timeout: float = 10.0) -> str | None:
    """The query's output, or None when `nvidia-smi` is absent or fails."""
    path = shutil.which(binary)
    if path is None:
        return None
    try:
        result = subprocess.run(
            [path, *NVIDIA_SMI_ARGS],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("nvidia-smi failed: %s; reporting no GPUs", exc)
        return None
    if result.returncode != 0:
        # nvidia-smi exits non-zero with "No devices were found" on driver-only hosts.
        logger.info("nvidia-smi exited %d: %s", result.returncode, result.stdout.strip())
        return None
    return result.stdout


_nvml_lock = threading.Lock()
_nvml_loaded = False
_nvml_reader: NvmlReader | None = None


def nvml_reader() -> NvmlReader | None:
    """The process's NVML reader, initialised once; None when NVML is not usable."""
    global _nvml_loaded, _nvml_reader
    with _nvml_lock:
        if not _nvml_loaded:
            from ps_runtime.agent import nvml

            _nvml_reader = nvml.load()
            _nvml_loaded = True
        return _nvml_reader


def query_gpus(binary: str = "nvidia-smi", *, reader: NvmlReader | None = None) -> list[GpuInfo]:
    """The node's GPUs: through NVML when usable, else `nvidia-smi`; [] when neither."""
    reader = reader or nvml_reader()
    if reader is not None:
        try:
            return reader.gpus()
        except Exception as exc:  # an NVMLError mid-way: fall back rather than fail
            logger.warning("NVML failed: %s; trying nvidia-smi", exc)
    output = run_nvidia_smi(binary)
    return [] if output is None else parse_nvidia_smi(output)


def query_gpu_usage(
    binary: str = "nvidia-smi", *, reader: NvmlReader | None = None, timeout: float = 3.0
) -> list[GpuUsage]:
    """Per-GPU utilization and memory in use, from the same sources as `query_gpus`; a
    hung `nvidia-smi` costs one heartbeat at most `timeout` seconds (it runs off the
    agent's event loop)."""
    reader = reader or nvml_reader()
    if reader is not None:
        try:
            return reader.usage()
        except Exception as exc:
            logger.warning("NVML failed: %s; trying nvidia-smi", exc)
    output = run_nvidia_smi(binary, timeout)
    return [] if output is None else parse_nvidia_smi_usage(output)
