"""Checkpoints of PS shards: atomic shard files, a committing manifest, re-sharding on load.

Layout under the checkpoint directory (shared by the shards, as on one node or NFS):

    <dir>/<name>/shard-<i>.npz   one per shard: values, optimizer slots, table ids, meta
    <dir>/<name>/MANIFEST.json   written last, by shard 0: step, num_shards, format

Every file is written to a temp name, fsynced and renamed, so a reader sees a whole
file or none. A checkpoint counts only once its manifest exists; a save killed
halfway leaves at most temp files and shard files without a manifest, which restore
never picks. Restore reads every old shard file and keeps what this shard owns now,
so the number of shards may change between save and restore.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from typing import Any

import numpy as np

from ps_runtime.server.optimizers import Optimizer, make_optimizer
from ps_runtime.server.store import ParameterStore, PartInfo, StoredVariable, VariableSpec
from ps_runtime.server.tables import Lifecycle, StoredTable
from ps_runtime.shards import sharding

FORMAT_VERSION = 2
# One checkpoint file read at a time per process: numpy parses each array's header with
# ast.literal_eval, and CPython 3.11 fails concurrent AST building in threads ("AST
# constructor recursion depth mismatch"), as two in-process servers restoring at once did.
_READ_LOCK = threading.Lock()
MANIFEST = "MANIFEST.json"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, write: Any) -> None:
    """Call `write(file)` on a temp file, fsync it and rename it to `path`."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


def shard_file(directory: str, shard: int) -> str:
    """Path of one shard's file in a checkpoint directory."""
    return os.path.join(directory, f"shard-{shard}.npz")


def write_shard(store: ParameterStore, f: Any, shard: int, num_shards: int, step: int) -> int:
    """Write the store's variables and slots as one shard file to `f`; return the count.

    Arrays are written straight from the live buffers under each variable's lock
    (no full copy), so memory stays near the table's own size.
    """
    import zipfile

    entries = store.entries()
    meta: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "shard": shard,
        "num_shards": num_shards,
        "step": step,
        "variables": {},
    }
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for e in entries:
            with e.lock:
                n = e.size if isinstance(e, StoredTable) else None
                arrays = {"values": e.values[:n]}
                arrays.update({f"slot/{k}": v[:n] for k, v in e.slots.items()})
                info: dict[str, Any] = {
                    "spec": e.spec.to_json(),
                    "version": e.version,
                    "params": e.optimizer.params,
                }
                if isinstance(e, StoredTable):
                    arrays["ids"] = e.row_ids[:n]
                    info["lifecycle"] = e.lifecycle.to_json()
                elif e.part is not None:
                    info["part"] = [e.part.base, e.part.base_rows, e.part.row_offset]
                for key, arr in arrays.items():
                    with z.open(f"{e.name}/{key}.npy", "w", force_zip64=True) as out:
                        np.lib.format.write_array(
                            out, np.ascontiguousarray(arr), allow_pickle=False
                        )
                meta["variables"][e.name] = info
        z.writestr("__meta__.json", json.dumps(meta))
    return len(meta["variables"])


def save_shard(
    store: ParameterStore, directory: str, shard: int, num_shards: int, step: int
) -> tuple[str, int]:
    """Write this shard's file into checkpoint `directory`; return (path, count)."""
    os.makedirs(directory, exist_ok=True)
    path = shard_file(directory, shard)
    count = 0

    def write(f: Any) -> None:
        nonlocal count
        count = write_shard(store, f, shard, num_shards, step)

    write_atomically(path, write)
    return path, count


def commit(directory: str, step: int, num_shards: int, keep: int) -> str:
    """Write the manifest once every shard file exists; prune to the newest `keep`."""
    missing = [i for i in range(num_shards) if not os.path.exists(shard_file(directory, i))]
    if missing:
        raise FileNotFoundError(f"cannot commit {directory}: shard files {missing} are missing")
    manifest = {
        "format": FORMAT_VERSION,
        "step": step,
        "num_shards": num_shards,
        "files": [os.path.basename(shard_file(directory, i)) for i in range(num_shards)],
        "time": time.time(),
    }
    path = os.path.join(directory, MANIFEST)
    write_atomically(path, lambda f: f.write(json.dumps(manifest, indent=1).encode()))
    if keep > 0:
        prune(os.path.dirname(directory), keep)
    return path


def committed(root: str) -> list[tuple[int, float, str]]:
    """(step, commit time, directory) of every committed checkpoint, oldest first."""
    out: list[tuple[int, float, str]] = []
    if not os.path.isdir(root):
        return out
    for name in os.listdir(root):
        path = os.path.join(root, name, MANIFEST)
        try:
            with open(path) as f:
                m = json.load(f)
            step, at = int(m["step"]), float(m.get("time", 0))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable or not a manifest: not a committed checkpoint
        out.append((step, at, os.path.join(root, name)))
    return sorted(out)


def latest(root: str) -> str | None:
    """Directory of the newest committed checkpoint, or None."""
    done = committed(root)
    return done[-1][2] if done else None


def prune(root: str, keep: int) -> None:
    """Delete committed checkpoints beyond the newest `keep` and older half-written ones."""
    done = committed(root)
    for _, _, path in done[:-keep]:
        shutil.rmtree(path, ignore_errors=True)
    if done:
        newest = os.path.getmtime(os.path.join(done[-1][2], MANIFEST))
        kept = {p for _, _, p in done}
        for name in os.listdir(root):
            path = os.path.join(root, name)
            if (
                os.path.isdir(path) and path not in kept and os.path.getmtime(path) < newest - 1
            ):  # leave saves in progress
                shutil.rmtree(path, ignore_errors=True)


def read_manifest(directory: str) -> dict[str, Any]:
    """The manifest of a checkpoint; FileNotFoundError if it was never committed."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{directory} is not a committed checkpoint (no {MANIFEST}); "
            "it was not saved completely"
        )
    with open(path) as f:
        manifest: dict[str, Any] = json.load(f)
    if manifest.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"{directory} has checkpoint format {manifest.get('format')}, "
            f"this runtime reads format {FORMAT_VERSION}"
        )
    return manifest


def restore_shard(store: ParameterStore, directory: str, shard: int, num_shards: int) -> int:
    """Load what shard `shard` of `num_shards` owns from a committed checkpoint.

    Tables keep the rows whose ids hash to this shard; dense variables and parts already
    created here are filled from whichever old file holds them (parts by overlapping
    rows); with an unchanged shard count, variables not created yet are re-created.
    Returns the number of variables restored.
    """
    manifest = read_manifest(directory)
    old_shards = int(manifest["num_shards"])
    for e in store.entries():
        if isinstance(e, StoredTable):
            e.clear()
    restored: set[str] = set()
    for old in range(old_shards):
        with _READ_LOCK, np.load(shard_file(directory, old), allow_pickle=False) as data:
            same = old == shard and old_shards == num_shards
            restored |= _restore_file(store, data, shard, num_shards, same)
    return len(restored)


def restore_copy(store: ParameterStore, f: Any, shard: int, num_shards: int) -> int:
    """Load a shard file written by `write_shard` for the same shard (a replica's copy)."""
    with _READ_LOCK, np.load(f, allow_pickle=False) as data:
        return len(_restore_file(store, data, shard, num_shards, True))


def _restore_file(
    store: ParameterStore, data: Any, shard: int, num_shards: int, create: bool
) -> set[str]:
    restored: set[str] = set()
    meta = json.loads(bytes(data.zip.read("__meta__.json")))
    for name, info in meta["variables"].items():
        spec = VariableSpec.from_json(info["spec"])

        def arrays(
            name: str = name, info: dict[str, Any] = info
        ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
            slots = {k: data[f"{name}/slot/{k}"] for k in _slot_names(info)}
            return data[f"{name}/values"], slots

        if spec.kind == "table":
            _restore_table(store, name, spec, info, data, shard, num_shards)
            restored.add(name)
        elif _restore_dense(store, name, spec, info, arrays, create):
            restored.add(name)
    return restored


def _slot_names(info: dict[str, Any]) -> tuple[str, ...]:
    opt = make_optimizer(info["spec"]["optimizer"][0], info["spec"]["optimizer"][1])
    names = opt.slot_names
    if info["spec"]["kind"] == "table":
        names = names + opt.row_slot_names
    return names


def _optimizer(spec: VariableSpec, info: dict[str, Any]) -> Optimizer:
    opt = make_optimizer(spec.optimizer[0], dict(spec.optimizer[1]))
    opt.set_params(**info.get("params", {}))
    return opt


def _restore_table(
    store: ParameterStore,
    name: str,
    spec: VariableSpec,
    info: dict[str, Any],
    data: Any,
    shard: int,
    num_shards: int,
) -> None:
    table = store.get(name)
    if not isinstance(table, StoredTable):
        table = StoredTable(
            name, spec, _optimizer(spec, info), Lifecycle(**info.get("lifecycle", {}))
        )
        store.put(name, table)
    ids = data[f"{name}/ids"]
    mine = sharding.shard_of_ids(ids, num_shards) == shard
    with table.lock:
        table.version = max(table.version, int(info["version"]))
        table.optimizer.set_params(**info.get("params", {}))
        if mine.all():  # same shard count: no filtered copies
            slots = {k: data[f"{name}/slot/{k}"] for k in _slot_names(info)}
            table.insert_rows(ids, data[f"{name}/values"], slots)
        elif mine.any():
            slots = {k: data[f"{name}/slot/{k}"][mine] for k in _slot_names(info)}
            table.insert_rows(ids[mine], data[f"{name}/values"][mine], slots)


def _restore_dense(
    store: ParameterStore,
    name: str,
    spec: VariableSpec,
    info: dict[str, Any],
    arrays: Any,
    create: bool,
) -> bool:
    """Fill every dense entry overlapping this saved variable or part (by base rows)."""
    base, _, old_offset = info["part"] if "part" in info else (name, 0, 0)
    targets = [
        e
        for e in store.entries()
        if isinstance(e, StoredVariable) and (e.part.base if e.part else e.name) == base
    ]
    if not targets:
        if not create:
            return False
        values, slots = arrays()
        entry = StoredVariable(
            name,
            spec,
            _optimizer(spec, info),
            values.copy(),
            {k: v.copy() for k, v in slots.items()},
            PartInfo(*info["part"]) if "part" in info else None,
        )
        entry.version = int(info["version"])
        store.put(name, entry)
        return True
    values, slots = arrays()
    old_rows = values.shape[0] if values.ndim else 1
    done = False
    for e in targets:
        offset = e.part.row_offset if e.part else 0
        rows = e.values.shape[0] if e.values.ndim else 1
        lo, hi = max(offset, old_offset), min(offset + rows, old_offset + old_rows)
        if lo >= hi:
            continue
        dst = slice(lo - offset, hi - offset) if e.values.ndim else ...
        src = slice(lo - old_offset, hi - old_offset) if values.ndim else ...
        with e.lock:
            e.values[dst] = values[src]
            for k, v in slots.items():
                e.slots[k][dst] = v[src]
            e.version = max(e.version, int(info["version"]))
        done = True
    return done
