"""The encoding of a metric chunk: a series' steps, times and values in one byte string.

Free of the database. Steps and times (microseconds since the epoch) are stored as
delta-of-deltas, values as the XOR of each float's bits with the previous one's; each
array's 8-byte words are byte-shuffled (all first bytes, then all second bytes, …) so
the zero bytes that regular steps, a shared time and slowly changing values leave line
up, and the whole is zlib-compressed. A training loss stored this way takes 1 to 3 bytes a
point, a step counter or a constant time almost none (bench/telemetry.py measures it).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Format byte, then the point count (little-endian uint32), then the zlib stream.
_HEADER = struct.Struct("<BI")
FORMAT = 1
# zlib level: 6 (the default) costs ~2x the time of 1 for ~10% fewer bytes on a loss
# curve; ingest is bound by Python and PostgreSQL, not by this.
LEVEL = 6

Int64s = npt.NDArray[np.int64]
Float64s = npt.NDArray[np.float64]


class ChunkError(ValueError):
    """A stored chunk that cannot be decoded (corrupt or of an unknown format)."""


@dataclass(frozen=True, slots=True)
class Columns:
    """Points of one series: `steps[i]`, `times[i]` (µs since the epoch) and `values[i]`
    belong together; in arrival order (or by step, stably, as stored)."""

    steps: Int64s
    times: Int64s
    values: Float64s

    def __len__(self) -> int:
        return len(self.steps)

    def by_step(self) -> Columns:
        """The same points ordered by step; points of one step keep their order."""
        if len(self.steps) < 2 or bool(np.all(self.steps[1:] >= self.steps[:-1])):
            return self
        order = np.argsort(self.steps, kind="stable")
        return Columns(self.steps[order], self.times[order], self.values[order])

    def take(self, mask: npt.NDArray[np.bool_] | slice) -> Columns:
        return Columns(self.steps[mask], self.times[mask], self.values[mask])

    @staticmethod
    def concat(parts: list[Columns]) -> Columns:
        if not parts:
            return EMPTY
        if len(parts) == 1:
            return parts[0]
        return Columns(
            np.concatenate([p.steps for p in parts]),
            np.concatenate([p.times for p in parts]),
            np.concatenate([p.values for p in parts]),
        )


EMPTY = Columns(
    np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
)


def _delta2(a: Int64s) -> Int64s:
    """First value, first delta, then delta-of-deltas (wrapping int64 arithmetic)."""
    out = np.diff(a, n=1, prepend=np.int64(0))
    out[1:] = np.diff(out)
    return out


def _undelta2(d: Int64s) -> Int64s:
    return np.cumsum(np.cumsum(d))


def _shuffle(words: npt.NDArray[np.uint64]) -> bytes:
    return words.view(np.uint8).reshape(-1, 8).T.tobytes()


def _unshuffle(raw: bytes, n: int) -> npt.NDArray[np.uint64]:
    grid = np.frombuffer(raw, dtype=np.uint8).reshape(8, n)
    return np.ascontiguousarray(grid.T).view(np.uint64).reshape(n)


def encode(columns: Columns) -> bytes:
    """The stored form of `columns` (in the order given: sort first with `by_step`)."""
    n = len(columns)
    steps = _delta2(columns.steps.astype(np.int64, copy=False)).view(np.uint64)
    times = _delta2(columns.times.astype(np.int64, copy=False)).view(np.uint64)
    bits = np.ascontiguousarray(columns.values, dtype="<f8").view(np.uint64)
    xored = bits.copy()
    xored[1:] ^= bits[:-1]
    body = zlib.compress(_shuffle(steps) + _shuffle(times) + _shuffle(xored), LEVEL)
    return _HEADER.pack(FORMAT, n) + body


def decode(data: bytes | memoryview) -> Columns:
    """The points `encode` stored.

    Raises:
        ChunkError: `data` is not a chunk this version wrote.
    """
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise ChunkError(f"a chunk of {len(data)} bytes has no header")
    fmt, n = _HEADER.unpack_from(data)
    if fmt != FORMAT:
        raise ChunkError(f"unknown chunk format {fmt}")
    try:
        raw = zlib.decompress(data[_HEADER.size :])
    except zlib.error as exc:
        raise ChunkError(f"corrupt chunk: {exc}") from None
    if len(raw) != 24 * n:
        raise ChunkError(f"a chunk of {n} points holds {len(raw)} bytes, not {24 * n}")
    if n == 0:
        return EMPTY
    size = 8 * n
    steps = _undelta2(_unshuffle(raw[:size], n).view(np.int64))
    times = _undelta2(_unshuffle(raw[size : 2 * size], n).view(np.int64))
    bits = np.bitwise_xor.accumulate(_unshuffle(raw[2 * size :], n))
    return Columns(steps, times, bits.view(np.float64))
