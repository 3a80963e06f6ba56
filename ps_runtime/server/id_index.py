"""A vectorized open-addressing hash map from int64 ids to int64 values (table rows).

Linear probing over two flat arrays (keys, values); every operation works on a whole
batch of ids at once, one numpy pass per probe round, so a lookup of n ids costs a
few vectorized passes instead of n Python dict operations. Deletions leave
tombstones; the map rebuilds itself when live keys plus tombstones pass the load limit.
"""

from __future__ import annotations

import numpy as np

EMPTY = np.iinfo(np.int64).min
TOMBSTONE = EMPTY + 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MAX_LOAD = 0.7


def _capacity_for(n: int) -> int:
    cap = 16
    while cap * MAX_LOAD < n:
        cap *= 2
    return cap


class IdIndex:
    """id -> value map over numpy arrays; ids must not be the two reserved minimum int64s."""

    def __init__(self, expected: int = 0) -> None:
        self._alloc(_capacity_for(expected))
        self.size = 0

    def _alloc(self, capacity: int) -> None:
        self._keys = np.full(capacity, EMPTY, dtype=np.int64)
        self._values = np.zeros(capacity, dtype=np.int32)  # row numbers fit in 31 bits
        self._mask = capacity - 1
        self._shift = np.uint64(64 - capacity.bit_length() + 1)
        self._tombstones = 0

    @property
    def capacity(self) -> int:
        """Number of slots."""
        return len(self._keys)

    def nbytes(self) -> int:
        """Bytes held by the slot arrays."""
        return int(self._keys.nbytes + self._values.nbytes)

    def _home(self, ids: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            h = (ids.astype(np.uint64, copy=False) * _GOLDEN) >> self._shift
        return h.astype(np.int64)

    def _find_slots(self, ids: np.ndarray) -> np.ndarray:
        """Slot holding each id, or -1."""
        # Most ids sit in their home slot: the first round works on whole arrays, the
        # next ones only on the ids that probe on (neither found nor at an empty slot).
        slot = self._home(ids)
        k = self._keys[slot]
        hit = k == ids
        out = np.where(hit, slot, -1)
        pending = np.flatnonzero(~hit & (k != EMPTY))
        slot, want = (slot[pending] + 1) & self._mask, ids[pending]
        while len(pending):
            k = self._keys[slot]
            hit = k == want
            out[pending[hit]] = slot[hit]
            go_on = ~hit & (k != EMPTY)
            pending, slot, want = pending[go_on], (slot[go_on] + 1) & self._mask, want[go_on]
        return out

    def get(self, ids: np.ndarray) -> np.ndarray:
        """Value of each id, or -1 when absent."""
        slots = self._find_slots(ids)
        return np.where(slots >= 0, self._values[slots], -1)

    def set_values(self, ids: np.ndarray, values: np.ndarray) -> None:
        """Change the values of ids already present."""
        slots = self._find_slots(ids)
        if (slots < 0).any():
            raise KeyError("set_values on ids that are not in the index")
        self._values[slots] = values

    def insert(self, ids: np.ndarray, values: np.ndarray) -> None:
        """Add unique ids that are not present yet."""
        if len(ids) == 0:
            return
        if (ids <= TOMBSTONE).any():
            raise ValueError(f"ids must be greater than {TOMBSTONE}")
        if (self.size + self._tombstones + len(ids)) > self.capacity * MAX_LOAD:
            self._rebuild(self.size + len(ids))
        self._insert_new(ids, np.asarray(values, dtype=np.int32))

    def _insert_new(self, ids: np.ndarray, values: np.ndarray) -> None:
        pending = np.arange(len(ids))
        slot = self._home(ids)
        while len(pending):
            k = self._keys[slot]
            free = (k == EMPTY) | (k == TOMBSTONE)
            cand, cslot = pending[free], slot[free]
            self._keys[cslot] = ids[cand]  # colliding candidates: the last write wins
            won = self._keys[cslot] == ids[cand]
            # Exactly one winner per claimed slot; losers probe on from the next slot.
            self._tombstones -= int(np.count_nonzero(k[free][won] == TOMBSTONE))
            self._values[cslot[won]] = values[cand[won]]
            placed = np.zeros(len(pending), dtype=bool)
            placed[np.flatnonzero(free)[won]] = True
            keep = ~placed
            pending, slot = pending[keep], (slot[keep] + 1) & self._mask
        self.size += len(ids)

    def delete(self, ids: np.ndarray) -> None:
        """Remove ids (absent ones are ignored)."""
        slots = self._find_slots(ids)
        slots = np.unique(slots[slots >= 0])
        self._keys[slots] = TOMBSTONE
        self._tombstones += len(slots)
        self.size -= len(slots)

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """All (ids, values), in slot order."""
        live = self._keys > TOMBSTONE
        return self._keys[live], self._values[live]

    def _rebuild(self, needed: int) -> None:
        ids, values = self.items()
        ids, values = ids.copy(), values.copy()
        self._alloc(_capacity_for(max(needed, len(ids))))
        self.size = 0
        self._insert_new(ids, values)

    def clear(self) -> None:
        """Forget every id (keeps the capacity)."""
        self._keys.fill(EMPTY)
        self.size = 0
        self._tombstones = 0
