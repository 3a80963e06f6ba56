"""PSEmbedding: a torch embedding layer whose rows live in a PS table.

Forward pulls each unique id's row once (one `lookup_async` for the whole batch),
crosses it to torch without a copy and gathers it by the inverse index; backward sums
the gradient per unique row and pushes it with `push_gradients_async(unique=True)`,
where the table's optimizer applies it (server side, sparse: only touched rows). The
rows are created on the PS on first pull; the module holds no parameters of its own,
so `torch.optim` never sees them and `ps_runtime.pytorch.PSParameters` skips it.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ps_runtime.client.pending import PendingPush, PendingRows
from ps_runtime.coordinator.variables import EmbeddingTable
from ps_runtime.pytorch import staging

# Pushes left in flight before the next one waits for the oldest (back-pressure when a
# training loop never calls flush()).
MAX_PENDING_PUSHES = 64


@dataclass
class _Pull:
    """One batch's rows being pulled: the ids as given, their unique ids and the inverse
    map (position in `unique` of every id), and the rows of `unique` in flight."""

    ids: np.ndarray
    unique: np.ndarray
    inverse: np.ndarray
    rows: PendingRows


class _Lookup(torch.autograd.Function):
    """Gather unique rows by the inverse index; backward sums per unique row and hands
    the [unique, dim] gradient to `push` (the rows get no gradient in torch)."""

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, inverse: torch.Tensor, push: Any) -> torch.Tensor:
        ctx.save_for_backward(inverse)
        ctx.num_rows = rows.shape[0]
        ctx.push = push
        return F.embedding(inverse, rows)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None]:
        (inverse,) = ctx.saved_tensors
        dim = grad.shape[-1]
        summed = grad.new_zeros((ctx.num_rows, dim))
        summed.index_add_(0, inverse.reshape(-1), grad.reshape(-1, dim))
        ctx.push(summed)
        return None, None, None


class PSEmbedding(nn.Module):
    """An embedding layer over a PS `EmbeddingTable`: ids of any shape in, rows out.

    `forward(ids)` maps an integer tensor of shape S to rows of shape S + (dim,) on the
    module's device (`.to(device)` moves where the rows land; the table stays on the
    PS). Backward pushes the summed gradient of every touched row asynchronously;
    `flush()` waits until the PS applied them, so call it before the step returns (then
    `coordinator.join()` means every update landed). `prefetch(ids)` starts the pull
    of a later batch now, so it overlaps the current step's compute; the forward with
    equal ids uses it. Call forward once per table per step for the table's optimizer
    to see the step's gradient as one update.

    A worker builds its copy of a model before any closure brings it a handle: create
    the layer unbound (`PSEmbedding(dim=16)`) and `bind(table)` it in the step, with
    the handle the closure received (handles carry the PS addresses of the moment, so
    rebinding every step follows a server that moved). Steps may share the layer from
    several threads; `flush()` then also waits for the other steps' pushes.

    Args:
        table: the table handle (`strategy.create_table(...)`), or None to bind later.
        dim: the row size; checked against the table's; required without a table.

    Raises:
        ValueError: neither a table nor `dim`, or `dim` differs from the table's.
    """

    def __init__(self, table: EmbeddingTable | None = None, dim: int | None = None) -> None:
        super().__init__()
        if dim is None:
            if table is None:
                raise ValueError("PSEmbedding needs a table or its dim (to bind a table later)")
            dim = table.dim
        self.dim = int(dim)
        self._table: EmbeddingTable | None = None
        # Zero-size and not saved: `.to(device)` moves it, so it tells where rows go.
        self.register_buffer("_device_anchor", torch.empty(0), persistent=False)
        self._lock = threading.Lock()  # guards _pushes and _prefetched
        self._pushes: collections.deque[PendingPush] = collections.deque()
        self._prefetched: list[_Pull] = []
        if table is not None:
            self.bind(table)

    @property
    def table(self) -> EmbeddingTable:
        """The bound table handle.

        Raises:
            RuntimeError: nothing is bound yet.
        """
        if self._table is None:
            raise RuntimeError(
                "this PSEmbedding has no table: build it with PSEmbedding(table), or call "
                ".bind(table) in the step with the handle the closure received"
            )
        return self._table

    @property
    def device(self) -> torch.device:
        """Where forward puts the rows."""
        return self.get_buffer("_device_anchor").device

    def bind(self, table: EmbeddingTable) -> PSEmbedding:
        """Use `table` from now on (cheap: call it every step); returns self.

        Raises:
            ValueError: the table's rows are not `dim` wide.
        """
        if table.dim != self.dim:
            raise ValueError(
                f"table {table.name!r} has rows of {table.dim}, this PSEmbedding {self.dim}"
            )
        if self._table is not None and self._table.name != table.name:
            with self._lock:
                self._prefetched.clear()  # rows of another table
        self._table = table
        return self

    def extra_repr(self) -> str:
        name = self._table.name if self._table is not None else None
        return f"table={name!r}, dim={self.dim}"

    def _start_pull(self, ids: np.ndarray) -> _Pull:
        unique, inverse = np.unique(ids, return_inverse=True)
        return _Pull(ids, unique, inverse, self.table.lookup_async(unique, unique=True))

    def prefetch(self, ids: torch.Tensor) -> None:
        """Start pulling the rows of `ids` now; the forward with equal ids uses them.

        The rows are as the PS holds them now: updates pushed after this call (by this
        step's backward, or other workers) are not in them.
        """
        pull = self._start_pull(staging.ids_to_numpy(ids))
        with self._lock:
            self._prefetched.append(pull)
            del self._prefetched[:-4]  # prefetches never used are dropped, oldest first

    def _take_prefetched(self, ids: np.ndarray) -> _Pull | None:
        with self._lock:
            for i, pull in enumerate(self._prefetched):
                if np.array_equal(pull.ids, ids):
                    return self._prefetched.pop(i)
        return None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of `ids`: shape ids.shape + (dim,), on this module's device."""
        flat = staging.ids_to_numpy(ids)
        pull = self._take_prefetched(flat) or self._start_pull(flat)
        device = self.device
        rows = staging.to_device(pull.rows.result(), device)
        inverse = staging.to_device(pull.inverse, device).view(ids.shape)
        if not torch.is_grad_enabled():
            return F.embedding(inverse, rows)
        table, unique = self.table, pull.unique
        rows.requires_grad_(True)

        def push(grad: torch.Tensor) -> None:
            self._push(table, unique, grad)

        # torch declares Function.apply without types.
        out: torch.Tensor = _Lookup.apply(rows, inverse, push)  # type: ignore[no-untyped-call]
        return out

    def _push(self, table: EmbeddingTable, unique: np.ndarray, grad: torch.Tensor) -> None:
        # A fresh array per backward (the view keeps its tensor alive), so a table that
        # accumulates steps locally may keep it.
        pending = table.push_gradients_async(unique, staging.to_host(grad), unique=True)
        if pending is None:  # gradients kept locally (the table's accumulate_steps)
            return
        with self._lock:
            self._pushes.append(pending)
            oldest = self._pushes.popleft() if len(self._pushes) > MAX_PENDING_PUSHES else None
        if oldest is not None:
            oldest.result()

    def flush(self) -> None:
        """Wait until the PS applied every gradient pushed so far.

        Raises:
            grpc.RpcError: a push failed for good (after the client's retries).
        """
        with self._lock:
            pending, self._pushes = self._pushes, collections.deque()
        for push in pending:
            push.result()
