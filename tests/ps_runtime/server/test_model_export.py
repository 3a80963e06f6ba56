"""Exported models: every shard's rows gathered, slots dropped, read back as they were."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

import ps_runtime
from ps_runtime.coordinator.cluster import LocalCluster
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.server.model_export import (
    ModelFormatError,
    export_model,
    load_model,
    pack_model,
)
from ps_runtime.server.optimizers import Adagrad, Adam


def _split(shape: tuple[int, ...], itemsize: int, n: int) -> int:
    return n if shape[0] >= 9 else 1  # "big" in parts over the shards, "bias" whole


def _train_and_save(root: Path, num_ps: int) -> dict[str, np.ndarray]:
    """Train a table and two dense variables over `num_ps` shards, save twice; return
    what the newest checkpoint holds."""
    ids = np.arange(0, 400, 2)  # only even ids have rows
    with LocalCluster(num_ps=num_ps, checkpoint_dir=str(root)) as cluster:
        s = ParameterServerStrategy(cluster.resolver, variable_partitioner=_split)
        table = s.create_table("emb/users", 4, optimizer=Adam(learning_rate=0.05))
        bias = s.create_variable("bias", (3,), optimizer=Adagrad(learning_rate=0.1))
        big = s.create_variable("big", (9, 2), initializer=("normal", {"seed": 2}))
        rng = np.random.default_rng(0)
        table.push_gradients(ids, rng.normal(size=(len(ids), 4)))
        s.save_checkpoint("ckpt-1", step=1)
        table.push_gradients(ids, rng.normal(size=(len(ids), 4)))
        bias.push_gradient(rng.normal(size=3))
        big.push_gradient(rng.normal(size=(9, 2)))
        s.save_checkpoint("ckpt-2", step=2)
        saved = {"ids": ids, "rows": table.lookup(ids), "bias": bias.read(), "big": big.read()}
        s.close()
    return saved


@pytest.mark.parametrize("num_ps", [1, 3])
def test_export_gathers_every_shard_and_loads_back(tmp_path: Path, num_ps: int) -> None:
    saved = _train_and_save(tmp_path / "ckpt", num_ps)
    out = tmp_path / "model"
    manifest = export_model(str(tmp_path / "ckpt"), str(out), {"name": "mf", "job_id": 7})
    assert sorted(os.listdir(out)) == ["manifest.json", "tables.npz"]
    assert manifest["step"] == 2 and manifest["checkpoint"] == "ckpt-2"
    assert manifest["tables"] == {"emb/users": {"rows": 200, "dim": 4, "dtype": "float32"}}
    assert manifest["dense"]["big"]["shape"] == [9, 2]
    assert json.loads((out / "manifest.json").read_text()) == manifest
    with np.load(out / "tables.npz") as data:
        assert not [k for k in data.files if "slot" in k]  # optimizer state stays behind

    packed = tmp_path / "model.zip"
    pack_model(str(out), str(packed))
    for path in (out, packed):
        model = ps_runtime.load_model(path)
        assert model.manifest["name"] == "mf" and model.manifest["job_id"] == 7
        users = model.tables["emb/users"]
        np.testing.assert_array_equal(users.ids, saved["ids"])  # sorted, every shard's
        np.testing.assert_array_equal(users.values, saved["rows"])
        shuffled = saved["ids"][::-7]
        np.testing.assert_array_equal(
            users.lookup(shuffled.reshape(-1, 1)), saved["rows"][::-7].reshape(-1, 1, 4)
        )
        np.testing.assert_array_equal(model.dense["bias"], saved["bias"])
        np.testing.assert_array_equal(model.dense["big"], saved["big"])
        with pytest.raises(KeyError, match=r"no row for ids \[1, 3\]"):
            users.lookup([0, 1, 3])
        with pytest.raises(KeyError, match="has no table 'emb/items'"):
            model.table("emb/items")


def test_without_a_committed_checkpoint_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "ckpt" / "ckpt-9").mkdir(parents=True)
    (tmp_path / "ckpt" / "ckpt-9" / "shard-0.npz").write_bytes(b"half written")
    with pytest.raises(FileNotFoundError, match="no committed checkpoint"):
        export_model(str(tmp_path / "ckpt"), str(tmp_path / "model"), {})
    with pytest.raises(FileNotFoundError, match="no committed checkpoint"):
        export_model(str(tmp_path / "missing"), str(tmp_path / "model"), {})
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_reserved_manifest_fields_and_an_existing_target_are_refused(tmp_path: Path) -> None:
    _train_and_save(tmp_path / "ckpt", 1)
    with pytest.raises(ValueError, match=r"\['step'\] are written by export_model"):
        export_model(str(tmp_path / "ckpt"), str(tmp_path / "model"), {"step": 1})
    (tmp_path / "model").mkdir()
    with pytest.raises(FileExistsError):
        export_model(str(tmp_path / "ckpt"), str(tmp_path / "model"), {})


def test_load_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no model at"):
        load_model(tmp_path / "nothing.zip")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFormatError, match=r"it has no manifest\.json"):
        load_model(tmp_path / "empty")
    (tmp_path / "text.zip").write_text("not a zip")
    with pytest.raises(ModelFormatError, match="neither a model directory nor a zip"):
        load_model(tmp_path / "text.zip")
    newer = tmp_path / "newer.zip"
    with zipfile.ZipFile(newer, "w") as z:
        z.writestr("manifest.json", json.dumps({"format": "trainhub-model", "format_version": 9}))
    with pytest.raises(ModelFormatError, match="format version 9, this runtime reads version 1"):
        load_model(newer)
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("manifest.json", "{}")
    with pytest.raises(ModelFormatError, match="does not describe a trainhub-model"):
        load_model(other)


def test_a_link_out_of_the_checkpoint_directory_is_refused(tmp_path: Path) -> None:
    # Another job's checkpoints, and a job whose own directory links to them.
    other = tmp_path / "job-1"
    _train_and_save(other, 1)
    mine = tmp_path / "job-2"
    mine.mkdir()
    (mine / "ckpt-9").symlink_to(other / "ckpt-2")
    with pytest.raises(ValueError, match="leads out of"):
        export_model(str(mine), str(tmp_path / "model"), {})
    # Its own step directory, but a shard file linked to the other job's.
    (mine / "ckpt-9").unlink()
    (mine / "ckpt-9").mkdir()
    (mine / "ckpt-9" / "MANIFEST.json").write_bytes(
        (other / "ckpt-2" / "MANIFEST.json").read_bytes()
    )
    (mine / "ckpt-9" / "shard-0.npz").symlink_to(other / "ckpt-2" / "shard-0.npz")
    with pytest.raises(ValueError, match="leads out of"):
        export_model(str(mine), str(tmp_path / "model"), {})
    assert not (tmp_path / "model").exists()


def test_a_manifest_without_a_step_is_no_committed_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "ckpt" / "ckpt-1").mkdir(parents=True)
    (tmp_path / "ckpt" / "ckpt-1" / "MANIFEST.json").write_text('{"num_shards": 1}')
    with pytest.raises(FileNotFoundError, match="no committed checkpoint"):
        export_model(str(tmp_path / "ckpt"), str(tmp_path / "model"), {})
