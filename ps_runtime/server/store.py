"""Variables and embedding tables held by one PS shard, with their optimizer state.

Checkpoints of a store are written and read by `ps_runtime.server.checkpoint`.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ps_runtime.server import initializers
from ps_runtime.server.optimizers import Optimizer, make_optimizer
from ps_runtime.server.tables import Lifecycle, StoredTable


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
        return {
            "kind": self.kind,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "initializer": [self.initializer[0], dict(self.initializer[1])],
            "optimizer": [self.optimizer[0], dict(self.optimizer[1])],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> VariableSpec:
        """Inverse of to_json."""
        return make_spec(
            d["kind"],
            tuple(d["shape"]),
            d["dtype"],
            d["initializer"][0],
            d["initializer"][1],
            d["optimizer"][0],
            d["optimizer"][1],
        )


def make_spec(
    kind: str,
    shape: tuple[int, ...],
    dtype: str,
    init_name: str,
    init_params: Mapping[str, float],
    opt_name: str,
    opt_params: Mapping[str, float],
) -> VariableSpec:
    """Build a VariableSpec, validating initializer and optimizer names and params."""
    initializers.validate(init_name, init_params)
    opt = make_optimizer(opt_name, opt_params)  # validates
    name, params = opt.spec()
    return VariableSpec(
        kind,
        tuple(int(s) for s in shape),
        np.dtype(dtype).str,
        (init_name, tuple(sorted(init_params.items()))),
        (name, tuple(sorted(params.items()))),
    )


APPLY_ELEMENTS = 1 << 16  # dense updates run over slices of this many elements


class StoredVariable:
    """A contiguous dense numpy array (a whole variable or one part) plus its slots."""

    def __init__(
        self,
        name: str,
        spec: VariableSpec,
        optimizer: Optimizer,
        values: np.ndarray,
        slots: dict[str, np.ndarray],
        part: PartInfo | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        self.optimizer = optimizer
        self.values = values
        self.slots = slots
        self.part = part
        self.lock = threading.Lock()  # guards values, slots and version
        self.version = 0
        self.pulls = 0
        self.pushes = 0

    def pull(self) -> np.ndarray:
        """Return a copy of the current value."""
        with self.lock:
            self.pulls += 1
            return self.values.copy()

    def pull_chunks(
        self, chunk_elements: int, encode: Callable[[np.ndarray, int], bytes]
    ) -> Iterator[bytes]:
        """Yield `encode(flat slice, element offset)` chunk by chunk, each under the lock."""
        flat = self.values.reshape(-1)
        with self.lock:
            self.pulls += 1
        for start in range(0, max(flat.size, 1), chunk_elements):
            with self.lock:  # a consistent chunk; pushes may land between chunks
                data = encode(flat[start : start + chunk_elements], start)
            yield data

    def push(self, grad: np.ndarray) -> int:
        """Apply one gradient; return the new version."""
        grad = grad.astype(self.values.dtype, copy=False)
        if grad.shape != self.values.shape:
            raise ValueError(
                f"gradient shape {grad.shape} does not match variable {self.values.shape}"
            )
        return self.push_pieces([(0, grad.reshape(-1))])

    def push_pieces(self, pieces: list[tuple[int, np.ndarray]]) -> int:
        """Apply one gradient given as (element offset, 1-D piece) covering the value."""
        if sum(len(p) for _, p in pieces) != self.values.size:
            raise ValueError(
                f"gradient pieces cover {sum(len(p) for _, p in pieces)} of "
                f"{self.values.size} elements"
            )
        if len(pieces) == 1 and self.values.size <= APPLY_ELEMENTS:
            with self.lock:
                self.version += 1
                self.pushes += 1
                self.optimizer.apply_dense(
                    self.values, pieces[0][1].reshape(self.values.shape), self.slots, self.version
                )
                return self.version
        step = self.begin_push()
        for offset, piece in pieces:
            self.apply_piece(offset, piece, step)
        return step

    def begin_push(self) -> int:
        """Count a new push and return its step (for optimizers that use one)."""
        with self.lock:
            self.version += 1
            self.pushes += 1
            return self.version

    def apply_piece(self, offset: int, piece: np.ndarray, step: int) -> None:
        """Apply the gradient of elements [offset, offset + len(piece)) of push `step`.

        Elementwise optimizers run over slices of APPLY_ELEMENTS, so temporaries stay
        small and heap-reused even for a variable of hundreds of MiB; the lock is held
        per slice, so pulls interleave (Hogwild, as TF's PS).
        """
        flat = self.values.reshape(-1)
        slots = {k: v.reshape(-1) for k, v in self.slots.items()}
        for s in range(0, len(piece), APPLY_ELEMENTS):
            dst = slice(offset + s, offset + min(s + APPLY_ELEMENTS, len(piece)))
            with self.lock:
                self.optimizer.apply_dense(
                    flat[dst],
                    piece[s : s + APPLY_ELEMENTS],
                    {k: v[dst] for k, v in slots.items()},
                    step,
                )

    def nbytes(self) -> int:
        """Bytes held by values and slots."""
        return int(self.values.nbytes + sum(s.nbytes for s in self.slots.values()))


@dataclass(frozen=True)
class PartInfo:
    """Where a part of a first-axis-sliced dense variable sits in the whole."""

    base: str
    base_rows: int
    row_offset: int


class PushLog:
    """Remembers recent (worker, incarnation, sequence) origins so a retransmit is a no-op.

    Per origin (a client process lifetime) the last WINDOW pushes are kept, and the
    MAX_ORIGINS most recently active origins; both are far beyond what can be in flight.
    """

    WINDOW = 65536
    MAX_ORIGINS = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _seen
        self._seen: collections.OrderedDict[
            tuple[str, int], tuple[set[tuple[int, str]], collections.deque[tuple[int, str]]]
        ] = collections.OrderedDict()

    def first_time(self, worker: str, incarnation: int, sequence: int, key: str) -> bool:
        """Record the origin for `key`; False if it was recorded before."""
        if not worker:
            return True  # anonymous pushes are not de-duplicated
        with self._lock:
            origin = (worker, incarnation)
            entry = self._seen.get(origin)
            if entry is None:
                entry = self._seen[origin] = (set(), collections.deque())
                while len(self._seen) > self.MAX_ORIGINS:
                    self._seen.popitem(last=False)
            self._seen.move_to_end(origin)
            seen, order = entry
            tag = (sequence, key)
            if tag in seen:
                return False
            seen.add(tag)
            order.append(tag)
            if len(order) > self.WINDOW:
                seen.discard(order.popleft())
            return True

    def dump(self) -> str:
        """The remembered origins as JSON (a replica's copy carries them)."""
        with self._lock:
            return json.dumps(
                [[w, inc, [list(t) for t in order]] for (w, inc), (_, order) in self._seen.items()]
            )

    def load(self, text: str) -> None:
        """Remember the origins of a `dump`, in addition to those known already."""
        for worker, incarnation, tags in json.loads(text):
            for sequence, key in tags:
                self.first_time(str(worker), int(incarnation), int(sequence), str(key))

    def forget(self, worker: str, incarnation: int, sequence: int, key: str) -> None:
        """Undo `first_time` after the push failed, so a retry applies."""
        if not worker:
            return
        with self._lock:
            entry = self._seen.get((worker, incarnation))
            if entry is not None:
                entry[0].discard((sequence, key))


class ParameterStore:
    """All variables of one shard, by name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the name -> entry map only
        self._entries: dict[str, StoredVariable | StoredTable] = {}
        self.push_log = PushLog()

    def _add(self, name: str, spec: VariableSpec, build: Any) -> bool:
        with self._lock:
            existing = self._entries.get(name)
            if existing is not None:
                if existing.spec != spec:
                    raise SpecMismatchError(
                        f"variable {name!r} already exists as {existing.spec.to_json()}; "
                        "use another name or the same shape, dtype, initializer and optimizer"
                    )
                return False
            self._entries[name] = build()
            return True

    def create_dense(
        self,
        name: str,
        spec: VariableSpec,
        initial_value: np.ndarray | None = None,
        part: PartInfo | None = None,
    ) -> bool:
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
                    spec.initializer[0],
                    dict(spec.initializer[1]),
                    spec.shape,
                    dtype,
                    offset=0 if part is None else part.row_offset,
                )
            return StoredVariable(name, spec, opt, values, opt.init_slots(spec.shape, dtype), part)

        return self._add(name, spec, build)

    def create_table(
        self,
        name: str,
        spec: VariableSpec,
        lifecycle: Lifecycle | None = None,
        expected_rows: int = 0,
    ) -> bool:
        """Create an embedding table; return False if an identical one already exists."""
        if spec.shape[0] <= 0:
            raise ValueError(f"table {name!r} needs a positive dim, got {spec.shape[0]}")
        if expected_rows < 0:
            raise ValueError("expected_rows must be >= 0")

        def build() -> StoredTable:
            opt = make_optimizer(spec.optimizer[0], dict(spec.optimizer[1]))
            return StoredTable(name, spec, opt, lifecycle or Lifecycle(), expected_rows)

        return self._add(name, spec, build)

    def dense(self, name: str) -> StoredVariable:
        """Return the dense variable `name` or raise KeyError with a hint."""
        entry = self._entries.get(name)
        if not isinstance(entry, StoredVariable):
            raise KeyError(
                f"no dense variable {name!r} on this shard; create it first "
                "(strategy.create_variable inside strategy.scope())"
            )
        return entry

    def table(self, name: str) -> StoredTable:
        """Return the table `name` or raise KeyError with a hint."""
        entry = self._entries.get(name)
        if not isinstance(entry, StoredTable):
            raise KeyError(
                f"no embedding table {name!r} on this shard; create it first "
                "(strategy.create_table inside strategy.scope())"
            )
        return entry

    def get(self, name: str) -> StoredVariable | StoredTable | None:
        """The entry `name`, or None."""
        return self._entries.get(name)

    def put(self, name: str, entry: StoredVariable | StoredTable) -> None:
        """Add or replace an entry (restore)."""
        with self._lock:
            self._entries[name] = entry

    def entries(self) -> list[StoredVariable | StoredTable]:
        """Snapshot of all entries."""
        with self._lock:
            return list(self._entries.values())

    def set_hyperparams(self, names: list[str], params: Mapping[str, float]) -> int:
        """Change optimizer hyperparameters of `names` (all when empty); return how many."""
        targets = [
            e
            for e in self.entries()
            if not names
            or e.name in names
            or (isinstance(e, StoredVariable) and e.part and e.part.base in names)
        ]
        if names and not targets:
            raise KeyError(f"no variables {names} on this shard")
        for e in targets:
            applicable = {k: v for k, v in params.items() if k in e.optimizer.defaults}
            if not applicable:
                raise ValueError(
                    f"{e.optimizer.name} of {e.name!r} has none of "
                    f"{sorted(params)}; allowed: {sorted(e.optimizer.defaults)}"
                )
            with e.lock:
                e.optimizer.set_params(**applicable)
        return len(targets)
