"""Models exported from checkpoints: every shard's rows gathered into one file set.

An exported model is a directory (or a zip of it) holding

    tables.npz      per table `tables/<name>/ids` (int64, sorted) and `tables/<name>/values`;
                    per dense variable `dense/<name>` (its parts joined); no optimizer slots
    manifest.json   format and version, the checkpoint's step, each table's rows and dim,
                    each dense variable's shape, and the fields the exporter adds

`export_model` reads the newest committed checkpoint of a checkpoint directory (the
layout of `checkpoint.py`), `pack_model` zips an export, and `load_model` reads either
back as numpy arrays (`ps_runtime.pytorch.load_model` as torch tensors).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from ps_runtime.server import checkpoint

MODEL_FORMAT = "trainhub-model"
MODEL_FORMAT_VERSION = 1
TABLES_FILE = "tables.npz"
MANIFEST_FILE = "manifest.json"
# Keys of manifest.json that export_model writes itself; callers add others.
RESERVED_FIELDS = frozenset({"format", "format_version", "step", "checkpoint", "tables", "dense"})


class ModelFormatError(ValueError):
    """The file set is not an exported model this runtime reads (says what is wrong)."""


@dataclass(frozen=True)
class ModelTable:
    """One embedding table of a model: row ids (sorted, unique) and their values."""

    name: str
    ids: np.ndarray
    values: np.ndarray

    def lookup(self, ids: Any) -> np.ndarray:
        """The rows of `ids` (any shape of int ids), in their order.

        Raises:
            KeyError: some ids have no row in the table (names a few of them).
        """
        wanted = np.asarray(ids, dtype=np.int64)
        flat = wanted.reshape(-1)
        pos = np.searchsorted(self.ids, flat)
        pos = np.minimum(pos, max(len(self.ids) - 1, 0))
        found = (self.ids[pos] == flat) if len(self.ids) else np.zeros(len(flat), bool)
        if not found.all():
            missing = np.unique(flat[~found])
            raise KeyError(
                f"table {self.name!r} has no row for ids {missing[:5].tolist()}"
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            )
        rows: np.ndarray = self.values[pos].reshape(*wanted.shape, *self.values.shape[1:])
        return rows


@dataclass(frozen=True)
class Model:
    """An exported model as numpy arrays, with its manifest."""

    manifest: dict[str, Any]
    tables: dict[str, ModelTable] = field(default_factory=dict)
    dense: dict[str, np.ndarray] = field(default_factory=dict)

    def table(self, name: str) -> ModelTable:
        """The table `name`; KeyError naming the tables there are."""
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(
                f"the model has no table {name!r}; it has {sorted(self.tables)}"
            ) from None

    def lookup(self, name: str, ids: Any) -> np.ndarray:
        """Rows `ids` of table `name`."""
        return self.table(name).lookup(ids)


def export_model(checkpoint_dir: str, out_path: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Gather the newest committed checkpoint under `checkpoint_dir` into `out_path`.

    Args:
        checkpoint_dir: a job's checkpoint directory (`<dir>/<name>/MANIFEST.json`...).
        out_path: the directory to create (must not exist); written under a temp name
            and renamed, so it appears whole or not at all.
        manifest: fields added to manifest.json (JSON values; not the reserved keys).
    Returns:
        The manifest written.
    Raises:
        FileNotFoundError: no committed checkpoint under `checkpoint_dir`.
        FileExistsError: `out_path` exists.
        ValueError: a reserved manifest key, or the checkpoint's files disagree.
    """
    clash = sorted(RESERVED_FIELDS & set(manifest))
    if clash:
        raise ValueError(f"manifest fields {clash} are written by export_model; rename them")
    source = checkpoint.latest(checkpoint_dir)
    if source is None:
        raise FileNotFoundError(
            f"{checkpoint_dir} holds no committed checkpoint (no <name>/{checkpoint.MANIFEST}); "
            "a job has one after its entrypoint saved at least once"
        )
    if os.path.exists(out_path):
        raise FileExistsError(f"{out_path} exists; export into a new path")
    ckpt = checkpoint.read_manifest(source)
    shards = int(ckpt["num_shards"])
    files = [checkpoint.shard_file(source, i) for i in range(shards)]
    _inside(checkpoint_dir, source, os.path.join(source, checkpoint.MANIFEST), *files)
    tables, dense = gather(source, shards)
    written: dict[str, Any] = {
        "format": MODEL_FORMAT,
        "format_version": MODEL_FORMAT_VERSION,
        "step": int(ckpt["step"]),
        "checkpoint": os.path.basename(source),
        "tables": {
            name: {"rows": len(ids), "dim": int(values.shape[1]), "dtype": str(values.dtype)}
            for name, (ids, values) in sorted(tables.items())
        },
        "dense": {
            name: {"shape": list(values.shape), "dtype": str(values.dtype)}
            for name, values in sorted(dense.items())
        },
        **manifest,
    }
    arrays: dict[str, np.ndarray] = {}
    for name, (ids, values) in tables.items():
        arrays[f"tables/{name}/ids"] = ids
        arrays[f"tables/{name}/values"] = values
    for name, values in dense.items():
        arrays[f"dense/{name}"] = values
    tmp = f"{out_path.rstrip(os.sep)}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        checkpoint.write_atomically(
            os.path.join(tmp, TABLES_FILE), lambda f: _write_arrays(f, arrays)
        )
        body = json.dumps(written, indent=1, sort_keys=True).encode()
        checkpoint.write_atomically(os.path.join(tmp, MANIFEST_FILE), lambda f: f.write(body))
        os.rename(tmp, out_path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    checkpoint._fsync_dir(os.path.dirname(os.path.abspath(out_path)))
    return written


def _inside(root: str, *paths: str) -> None:
    """Refuse a path that leads out of `root` (the job's checkpoint directory, written by
    the job's own code: a link there must not export another job's files)."""
    top = os.path.realpath(root)
    for path in paths:
        real = os.path.realpath(path)
        if real != top and not real.startswith(top + os.sep):
            raise ValueError(f"{path} leads out of {root} (to {real}); nothing was exported")


def gather(
    directory: str, num_shards: int
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray]]:
    """Every table's (ids, values) sorted by id and every dense variable whole, read from
    the shard files of one committed checkpoint; optimizer slots are left behind."""
    ids: dict[str, list[np.ndarray]] = {}
    values: dict[str, list[np.ndarray]] = {}
    parts: dict[str, list[tuple[int, int, np.ndarray]]] = {}
    for shard in range(num_shards):
        path = checkpoint.shard_file(directory, shard)
        with checkpoint._READ_LOCK, np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data.zip.read("__meta__.json")))
            for name, info in meta["variables"].items():
                if info["spec"]["kind"] == "table":
                    ids.setdefault(name, []).append(data[f"{name}/ids"])
                    values.setdefault(name, []).append(data[f"{name}/values"])
                else:
                    base, base_rows, offset = info.get("part", (name, 0, 0))
                    parts.setdefault(base, []).append(
                        (int(base_rows), int(offset), data[f"{name}/values"])
                    )
    tables = {name: _sorted_rows(name, ids[name], values[name]) for name in ids}
    dense = {name: _joined(name, pieces) for name, pieces in parts.items()}
    return tables, dense


def _sorted_rows(
    name: str, ids: list[np.ndarray], values: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    all_ids = np.concatenate(ids).astype(np.int64, copy=False)
    all_values = np.concatenate(values)
    order = np.argsort(all_ids, kind="stable")
    all_ids, all_values = all_ids[order], all_values[order]
    if len(all_ids) > 1 and (all_ids[1:] == all_ids[:-1]).any():
        raise ValueError(f"table {name!r} has ids in more than one shard file")
    return all_ids, np.ascontiguousarray(all_values)


def _joined(name: str, pieces: list[tuple[int, int, np.ndarray]]) -> np.ndarray:
    if len(pieces) == 1 and pieces[0][0] == 0:
        return pieces[0][2]  # a whole variable
    base_rows = pieces[0][0]
    first = pieces[0][2]
    out = np.zeros((base_rows, *first.shape[1:]), dtype=first.dtype)
    covered = np.zeros(base_rows, dtype=bool)
    for _, offset, part in pieces:
        out[offset : offset + len(part)] = part
        covered[offset : offset + len(part)] = True
    if not covered.all():
        raise ValueError(f"dense variable {name!r} misses rows in the checkpoint's parts")
    return out


def _write_arrays(f: IO[bytes], arrays: Mapping[str, np.ndarray]) -> None:
    with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as z:
        for key, arr in arrays.items():
            with z.open(f"{key}.npy", "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.ascontiguousarray(arr), allow_pickle=False)


def pack_model(directory: str, zip_path: str) -> None:
    """Zip an exported model directory into `zip_path` (atomically; members at the top)."""

    def write(f: IO[bytes]) -> None:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for member in (MANIFEST_FILE, TABLES_FILE):
                info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                with (
                    open(os.path.join(directory, member), "rb") as src,
                    z.open(info, "w", force_zip64=True) as dst,
                ):
                    shutil.copyfileobj(src, dst, 1 << 20)

    checkpoint.write_atomically(zip_path, write)


def load_model(path: str | os.PathLike[str]) -> Model:
    """Read an exported model: its directory or a zip of it.

    Raises:
        FileNotFoundError: nothing at `path`.
        ModelFormatError: not an exported model, or one of a format this runtime does not read.
    """
    with _opened(os.fspath(path)) as read:
        manifest = _manifest(path, read(MANIFEST_FILE))
        tables: dict[str, ModelTable] = {}
        dense: dict[str, np.ndarray] = {}
        with np.load(io.BytesIO(read(TABLES_FILE)), allow_pickle=False) as data:
            for name in manifest["tables"]:
                try:
                    ids, values = data[f"tables/{name}/ids"], data[f"tables/{name}/values"]
                except KeyError:
                    raise ModelFormatError(f"{path}: {TABLES_FILE} lacks table {name!r}") from None
                tables[name] = ModelTable(name, ids, values)
            for name in manifest["dense"]:
                dense[name] = data[f"dense/{name}"]
    return Model(manifest, tables, dense)


@contextmanager
def _opened(path: str) -> Iterator[Any]:
    """A function reading one member of the model at `path` (directory or zip)."""
    if os.path.isdir(path):

        def read_file(member: str) -> bytes:
            try:
                with open(os.path.join(path, member), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                raise ModelFormatError(
                    f"{path} is not an exported model: it has no {member}"
                ) from None

        yield read_file
        return
    if not os.path.exists(path):
        raise FileNotFoundError(f"no model at {path}")
    if not zipfile.is_zipfile(path):
        raise ModelFormatError(f"{path} is neither a model directory nor a zip of one")
    with zipfile.ZipFile(path) as z:
        names = {n.rsplit("/", 1)[-1]: n for n in z.namelist() if n.count("/") <= 1}

        def read_member(member: str) -> bytes:
            if member not in names:
                raise ModelFormatError(f"{path} is not an exported model: it has no {member}")
            return z.read(names[member])

        yield read_member


def _manifest(path: Any, body: bytes) -> dict[str, Any]:
    try:
        manifest = json.loads(body)
    except ValueError as exc:
        raise ModelFormatError(f"{path}: {MANIFEST_FILE} is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MODEL_FORMAT:
        raise ModelFormatError(f"{path}: {MANIFEST_FILE} does not describe a {MODEL_FORMAT}")
    if manifest.get("format_version") != MODEL_FORMAT_VERSION:
        raise ModelFormatError(
            f"{path} has model format version {manifest.get('format_version')}, this runtime "
            f"reads version {MODEL_FORMAT_VERSION}: load it with a matching trainhub-runtime"
        )
    if not isinstance(manifest.get("tables"), dict) or not isinstance(manifest.get("dense"), dict):
        raise ModelFormatError(f"{path}: {MANIFEST_FILE} lacks its tables or dense entries")
    return manifest
