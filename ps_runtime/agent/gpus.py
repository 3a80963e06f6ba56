"""GPU discovery through `nvidia-smi`."""

from __future__ import annotations

import csv
import logging
import shutil
import subprocess
from typing import TypedDict

logger = logging.getLogger(__name__)

NVIDIA_SMI_ARGS = (
    "--query-gpu=index,name,memory.total,uuid",
    "--format=csv,noheader,nounits",
)


class GpuInfo(TypedDict):
    index: int
    model: str
    memory_mb: int
    uuid: str


def parse_nvidia_smi(output: str) -> list[GpuInfo]:
    """Parse `nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits`.

    Lines that are not four comma-separated fields with numeric index and memory (such as
    "No devices were found") are skipped.
    """
    gpus: list[GpuInfo] = []
    for row in csv.reader(output.splitlines(), skipinitialspace=True):
        if len(row) != 4:
            continue
        index, name, memory, uuid = (field.strip() for field in row)
        try:
            gpus.append(
                GpuInfo(index=int(index), model=name, memory_mb=int(float(memory)), uuid=uuid)
            )
        except ValueError:
            continue
    return sorted(gpus, key=lambda g: g["index"])


def query_gpus(binary: str = "nvidia-smi", timeout: float = 10.0) -> list[GpuInfo]:
    """The node's GPUs, or [] when `nvidia-smi` is absent or fails."""
    path = shutil.which(binary)
    if path is None:
        return []
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
        return []
    if result.returncode != 0:
        # nvidia-smi exits non-zero with "No devices were found" on driver-only hosts.
        logger.info("nvidia-smi exited %d: %s", result.returncode, result.stdout.strip())
        return []
    return parse_nvidia_smi(result.stdout)
