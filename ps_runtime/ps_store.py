"""Variables and embedding tables held by one PS shard, with their optimizer state."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ps_runtime import initializers
from ps_runtime.optimizers import Optimizer, make_optimizer


class SpecMismatchError(ValueError):
    """A variable of that name exists with a different shape, dtype or optimizer."""


@dataclass(frozen=True)
class VariableSpec:
    """What defines a variable; re-creating it with the same spec is a no-op."""

    kind: str  # "dense" or "table"
    shape: tuple[int, ...]  # for tables: (dim,)
    dtype: str
    initializer: tuple[str, tuple[tuple[str, float], ...]]
    optimizer: tuple[str, tuple[tuple[str, float], ...]]

    def to_json(self) -> dict[str, Any]:
        """JSON form stored in checkpoints."""
        return {"kind": self.kind, "shape": list(self.shape), "dtype": self.dtype,
                "initializer": [self.initializer[0], dict(self.initializer[1])],
                "optimizer": [self.optimizer[0], dict(self.optimizer[1])]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> VariableSpec:
        """Inverse of to_json."""
        return make_spec(d["kind"], tuple(d["shape"]), d["dtype"], d["initializer"][0],
                         d["initializer"][1], d["optimizer"][0], d["optimizer"][1])


def make_spec(
    kind: str, shape: tuple[int, ...], dtype: str,
    init_name: str, init_params: Mapping[str, float],
    opt_name: str, opt_params: Mapping[str, float],
) -> VariableSpec:
    """Build a VariableSpec, validating initializer and optimizer names and params."""
    initializers.validate(init_name, init_params)
    opt = make_optimizer(opt_name, opt_params)  # validates
    name, params = opt.spec()
    return VariableSpec(kind, tuple(int(s) for s in shape), np.dtype(dtype).str,
                        (init_name, tuple(sorted(init_params.items()))),
                        (name, tuple(sorted(params.items()))))


@dataclass
class _Entry:
    """State shared by dense variables and tables."""

    name: str
    spec: VariableSpec
    optimizer: Optimizer
    lock: threading.Lock = field(default_factory=threading.Lock)
    version: int = 0
    pulls: int = 0
    pushes: int = 0


@dataclass
class StoredVariable(_Entry):
    """A contiguous numpy array plus its optimizer slots."""

    values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    slots: dict[str, np.ndarray] = field(default_factory=dict)

    def pull(self) -> np.ndarray:
        """Return a copy of the current value."""
        with self.lock:
            self.pulls += 1
            return self.values.copy()

    def push(self, grad: np.ndarray) -> int:
        """Apply one gradient; return the new version."""
        with self.lock:
            self.version += 1
            self.pushes += 1
            self.optimizer.apply_dense(self.values, grad.astype(self.values.dtype, copy=False),
                                       self.slots, self.version)
            return self.version

    def nbytes(self) -> int:
        """Bytes held by values and slots."""
        return int(self.values.nbytes + sum(s.nbytes for s in self.slots.values()))


@dataclass
class StoredTable(_Entry):
    """Rows keyed by arbitrary int64 ids, created lazily on first pull.

    The id index is two arrays kept sorted by id (`_index_ids`, `_index_rows`), so
    lookups are one vectorized `np.searchsorted`; new ids are merged in with
    `np.insert` (linear, no re-sort).
    """

    values: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    slots: dict[str, np.ndarray] = field(default_factory=dict)
    size: int = 0
    _index_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _index_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def dim(self) -> int:
        """Row width."""
        return self.spec.shape[0]

    def _lookup(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id, or -1 when the id has no row yet."""
        if self.size == 0:
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self._index_ids, ids), self.size - 1)
        found = self._index_ids[pos] == ids
        return np.where(found, self._index_rows[pos], -1)

    def _grow(self, needed: int) -> None:
        capacity = len(self.values)
        if needed <= capacity:
            return
        new_capacity = max(needed, 2 * capacity, 64)

        def grown(a: np.ndarray, fill: float) -> np.ndarray:
            out = np.full((new_capacity, self.dim), fill, dtype=a.dtype)
            out[: self.size] = a[: self.size]
            return out

        self.values = grown(self.values, 0.0)
        self.slots = {k: grown(v, self.optimizer.slot_initial_value(k))
                      for k, v in self.slots.items()}

    def _create_rows(self, new_ids: np.ndarray) -> None:
        """Append rows for `new_ids` (unique, not yet present) and index them."""
        start, n = self.size, len(new_ids)
        self._grow(start + n)
        init_name, init_params = self.spec.initializer
        self.values[start:start + n] = initializers.initial_values(
            init_name, dict(init_params), new_ids, self.dim, self.values.dtype)
        for k, slot in self.slots.items():
            slot[start:start + n] = self.optimizer.slot_initial_value(k)
        at = np.searchsorted(self._index_ids, new_ids)
        self._index_ids = np.insert(self._index_ids, at, new_ids)
        self._index_rows = np.insert(self._index_rows, at, np.arange(start, start + n))
        self.size = start + n

    def rows_for(self, ids: np.ndarray) -> np.ndarray:
        """Row indices of `ids`, creating missing rows with the initializer (hold lock)."""
        rows = self._lookup(ids)
        missing = rows < 0
        if missing.any():
            self._create_rows(np.unique(ids[missing]))
            rows = self._lookup(ids)
        return rows

    def pull(self, ids: np.ndarray) -> np.ndarray:
        """Return the rows of `ids` ([n, dim]), creating missing ones."""
        with self.lock:
            self.pulls += 1
            rows = self.rows_for(ids)  # may reallocate self.values; index it afterwards
            return self.values[rows]

    def push(self, ids: np.ndarray, grads: np.ndarray) -> int:
        """Apply row gradients for unique `ids`; return the new version."""
        if grads.shape != (len(ids), self.dim):
            raise ValueError(f"gradients of shape {grads.shape} do not match "
                             f"{len(ids)} ids x dim {self.dim}")
        if len(np.unique(ids)) != len(ids):
            raise ValueError("ids in a push must be unique; sum duplicate gradients first")
        with self.lock:
            self.version += 1
            self.pushes += 1
            rows = self.rows_for(ids)  # may reallocate values and slots
            self.optimizer.apply_rows(self.values, rows, grads, self.slots, self.version)
            return self.version

    def ids(self) -> np.ndarray:
        """All ids with a row, in row order."""
        out = np.empty(self.size, dtype=np.int64)
        out[self._index_rows] = self._index_ids
        return out

    def nbytes(self) -> int:
        """Bytes held by values and slots (allocated capacity)."""
        return int(self.values.nbytes + sum(s.nbytes for s in self.slots.values()))


class ParameterStore:
    """All variables of one shard, by name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the name -> entry map only
        self._entries: dict[str, StoredVariable | StoredTable] = {}

    def _add(self, name: str, spec: VariableSpec,
             build: Any) -> bool:
        with self._lock:
            existing = self._entries.get(name)
            if existing is not None:
                if existing.spec != spec:
                    raise SpecMismatchError(
                        f"variable {name!r} already exists as {existing.spec.to_json()}; "
                        "use another name or the same shape, dtype, initializer and optimizer")
                return False
            self._entries[name] = build()
            return True

    def create_dense(self, name: str, spec: VariableSpec,
                     initial_value: np.ndarray | None = None) -> bool:
        """Create a dense variable; return False if an identical one already exists."""
        if initial_value is not None and tuple(initial_value.shape) != spec.shape:
            raise ValueError(f"initial value shape {initial_value.shape} != {spec.shape}")

        def build() -> StoredVariable:
            opt = make_optimizer(spec.optimizer[0], dict(spec.optimizer[1]))
            dtype = np.dtype(spec.dtype)
            if initial_value is not None:
                values = np.array(initial_value, dtype=dtype, order="C")
            else:
                values = initializers.dense_initial_value(
                    spec.initializer[0], dict(spec.initializer[1]), spec.shape, dtype)
            return StoredVariable(name, spec, opt, values=values,
                                 slots=opt.init_slots(spec.shape, dtype))

        return self._add(name, spec, build)

    def create_table(self, name: str, spec: VariableSpec) -> bool:
        """Create an embedding table; return False if an identical one already exists."""
        if spec.shape[0] <= 0:
            raise ValueError(f"table {name!r} needs a positive dim, got {spec.shape[0]}")

        def build() -> StoredTable:
            opt = make_optimizer(spec.optimizer[0], dict(spec.optimizer[1]))
            dtype = np.dtype(spec.dtype)
            shape = (0, spec.shape[0])
            return StoredTable(name, spec, opt, values=np.zeros(shape, dtype=dtype),
                                  slots=opt.init_slots(shape, dtype))

        return self._add(name, spec, build)

    def dense(self, name: str) -> StoredVariable:
        """Return the dense variable `name` or raise KeyError with a hint."""
        entry = self._entries.get(name)
        if not isinstance(entry, StoredVariable):
            raise KeyError(f"no dense variable {name!r} on this shard; create it first "
                           "(strategy.create_variable inside strategy.scope())")
        return entry

    def table(self, name: str) -> StoredTable:
        """Return the table `name` or raise KeyError with a hint."""
        entry = self._entries.get(name)
        if not isinstance(entry, StoredTable):
            raise KeyError(f"no embedding table {name!r} on this shard; create it first "
                           "(strategy.create_table inside strategy.scope())")
        return entry

    def entries(self) -> list[StoredVariable | StoredTable]:
        """Snapshot of all entries."""
        with self._lock:
            return list(self._entries.values())

    def save(self, path: str) -> int:
        """Write every variable, its slots and table ids to `path` (.npz) atomically."""
        arrays: dict[str, np.ndarray] = {}
        meta: dict[str, Any] = {}
        for e in self.entries():
            with e.lock:
                n = e.size if isinstance(e, StoredTable) else None
                arrays[f"{e.name}/values"] = e.values[:n].copy()
                for k, v in e.slots.items():
                    arrays[f"{e.name}/slot/{k}"] = v[:n].copy()
                if isinstance(e, StoredTable):
                    arrays[f"{e.name}/ids"] = e.ids()
                meta[e.name] = {"spec": e.spec.to_json(), "version": e.version}
        arrays["__meta__"] = np.array(json.dumps(meta))
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy stubs confuse **kwds with allow_pickle
        os.replace(tmp, path)
        return len(meta)

    def restore(self, path: str) -> int:
        """Replace all variables with those saved at `path`."""
        entries: dict[str, StoredVariable | StoredTable] = {}
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["__meta__"]))
            for name, m in meta.items():
                spec = VariableSpec.from_json(m["spec"])
                opt = make_optimizer(spec.optimizer[0], dict(spec.optimizer[1]))
                slots = {k: data[f"{name}/slot/{k}"].copy() for k in opt.slot_names}
                entry: StoredVariable | StoredTable
                if spec.kind == "dense":
                    entry = StoredVariable(name, spec, opt, values=data[f"{name}/values"].copy(),
                                          slots=slots)
                else:
                    values = data[f"{name}/values"].copy()
                    ids = data[f"{name}/ids"]
                    order = np.argsort(ids, kind="stable")
                    entry = StoredTable(name, spec, opt, values=values, slots=slots,
                                           size=len(ids), _index_ids=ids[order].copy(),
                                           _index_rows=order.astype(np.int64))
                entry.version = int(m["version"])
                entries[name] = entry
        with self._lock:
            self._entries = entries
        return len(entries)
