"""`ps_runtime.pytorch.load_model`: an exported model's rows as torch tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ps_runtime.coordinator.cluster import LocalCluster
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.pytorch import load_model
from ps_runtime.server.model_export import export_model, pack_model


def test_tables_and_dense_variables_load_as_tensors(tmp_path: Path) -> None:
    ids = np.array([5, 17, 3, 40])
    with LocalCluster(num_ps=2, checkpoint_dir=str(tmp_path / "ckpt")) as cluster:
        s = ParameterServerStrategy(cluster.resolver)
        table = s.create_table("items", 3, initializer=("normal", {"seed": 1}))
        w = s.create_variable("w", (2, 2), initializer=("normal", {"seed": 2}))
        rows, dense = table.lookup(ids), w.read()
        s.save_checkpoint("ckpt-1", step=1)
        s.close()
    export_model(str(tmp_path / "ckpt"), str(tmp_path / "model"), {})
    pack_model(str(tmp_path / "model"), str(tmp_path / "model.zip"))
    model = load_model(tmp_path / "model.zip")
    items = model.tables["items"]
    assert items.ids.tolist() == [3, 5, 17, 40] and items.values.dtype == torch.float32
    got = items.lookup(torch.tensor([[40, 5], [3, 17]]))
    assert got.shape == (2, 2, 3)
    np.testing.assert_array_equal(got.numpy(), rows[[3, 0, 2, 1]].reshape(2, 2, 3))
    np.testing.assert_array_equal(model.dense["w"].numpy(), dense)
    with pytest.raises(KeyError, match=r"no row for ids \[6\]"):
        items.lookup([6])
