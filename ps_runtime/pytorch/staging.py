"""Crossing between the PS client's numpy arrays and torch tensors on one device.

On the CPU a crossing is a view (`torch.from_numpy`, `Tensor.numpy()`): no copy. On
CUDA the host side is pinned memory and copies are `non_blocking`: torch's caching host
allocator reuses pinned blocks once the copies that read them are done, and a copy to
the host waits only for its own stream before numpy reads the result.
"""

from __future__ import annotations

import numpy as np
import torch


def is_cuda(device: torch.device) -> bool:
    """True when tensors on `device` need pinned staging to cross to numpy."""
    return device.type == "cuda"


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """`array` as a tensor on `device`: a view of the same memory on the CPU; on CUDA a
    non-blocking copy from a pinned host block."""
    tensor = torch.from_numpy(array)
    if not is_cuda(device):
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """`tensor` as a numpy array: a view on the CPU; from CUDA a copy into pinned memory,
    complete when this returns."""
    (array,) = to_host_all([tensor])
    return array


def to_host_all(tensors: list[torch.Tensor]) -> list[np.ndarray]:
    """`to_host` for several tensors: on CUDA every copy is issued before one wait."""
    arrays: list[np.ndarray] = []
    waits: dict[torch.device, torch.cuda.Stream] = {}
    for tensor in tensors:
        tensor = tensor.detach()
        if not is_cuda(tensor.device):
            arrays.append(tensor.contiguous().numpy())
            continue
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        waits.setdefault(tensor.device, torch.cuda.current_stream(tensor.device))
        arrays.append(host.numpy())
    for stream in waits.values():
        stream.synchronize()  # the copies and the work before them on the stream
    return arrays


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The numpy dtype of a torch dtype (e.g. torch.float32 -> float32).

    Raises:
        TypeError: numpy has no such dtype (e.g. bfloat16).
    """
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:
        raise TypeError(f"{dtype} has no numpy dtype; keep PS parameters float32") from None


def ids_to_numpy(ids: torch.Tensor) -> np.ndarray:
    """Integer ids of any shape as a flat int64 numpy array (a view when already int64
    and contiguous on the CPU).

    Raises:
        TypeError: `ids` is not an integer tensor.
    """
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"ids must be an integer tensor (e.g. torch.long), got {ids.dtype}")
    flat = ids.detach().reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    return np.ascontiguousarray(flat.numpy(), dtype=np.int64)
