"""Exported models as torch tensors (`ps_runtime.load_model` gives numpy arrays)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ps_runtime.server import model_export


@dataclass(frozen=True)
class TorchTable:
    """One table of an exported model: sorted row ids and their values, as tensors."""

    name: str
    ids: torch.Tensor
    values: torch.Tensor

    def lookup(self, ids: torch.Tensor | Any) -> torch.Tensor:
        """The rows of `ids` (a tensor or array of int ids, any shape), in their order.

        Raises:
            KeyError: some ids have no row in the table (names a few of them).
        """
        wanted = torch.as_tensor(ids, dtype=torch.int64, device=self.ids.device)
        flat = wanted.reshape(-1)
        pos = torch.searchsorted(self.ids, flat).clamp(max=max(len(self.ids) - 1, 0))
        found = self.ids[pos] == flat if len(self.ids) else torch.zeros_like(flat, dtype=torch.bool)
        if not bool(found.all()):
            missing = torch.unique(flat[~found]).tolist()
            raise KeyError(f"table {self.name!r} has no row for ids {missing[:5]}")
        return self.values[pos].reshape(*wanted.shape, *self.values.shape[1:])


@dataclass(frozen=True)
class TorchModel:
    """An exported model's tables and dense variables as tensors, with its manifest."""

    manifest: dict[str, Any]
    tables: dict[str, TorchTable] = field(default_factory=dict)
    dense: dict[str, torch.Tensor] = field(default_factory=dict)


def load_model(
    path: str | os.PathLike[str], device: torch.device | str | None = None
) -> TorchModel:
    """Read an exported model (directory or zip) as tensors on `device` (default CPU).

    Raises:
        FileNotFoundError: nothing at `path`.
        ModelFormatError: not an exported model this runtime reads.
    """
    model = model_export.load_model(path)
    target = torch.device(device or "cpu")

    def tensor(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(target)

    tables = {
        name: TorchTable(name, tensor(t.ids), tensor(t.values)) for name, t in model.tables.items()
    }
    dense = {name: tensor(v) for name, v in model.dense.items()}
    return TorchModel(model.manifest, tables, dense)
