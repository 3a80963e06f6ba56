"""PSEmbedding against a plain nn.Embedding, on an in-process cluster of two PS shards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from ps_runtime.coordinator.cluster import LocalCluster
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.coordinator.variables import EmbeddingTable
from ps_runtime.pytorch import PSEmbedding
from ps_runtime.server.optimizers import SGD

VOCAB, DIM, LR = 40, 8, 0.5
# Arbitrary int64 ids on the PS (rows are created on first pull); position k in the
# local nn.Embedding stands for PS id IDS[k].
IDS = np.arange(VOCAB, dtype=np.int64) * 7_919_000_003 + 11


@pytest.fixture(scope="module")
def strategy() -> Iterator[ParameterServerStrategy]:
    with LocalCluster(num_ps=2, num_workers=1) as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        yield strategy
        strategy.close()


def _table(strategy: ParameterServerStrategy, name: str) -> EmbeddingTable:
    return strategy.create_table(
        name,
        DIM,
        initializer=("normal", {"stddev": 0.3, "seed": 3}),
        optimizer=SGD(learning_rate=LR),
    )


HEAD = torch.from_numpy(np.random.default_rng(1).normal(0, 0.5, (3, DIM)).astype(np.float32))


def _batches(steps: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Index batches of shape [12, 3] over a small vocabulary (so ids repeat within a
    batch, across fields and examples), with targets from hidden rows."""
    rng = np.random.default_rng(seed)
    hidden = torch.from_numpy(rng.normal(0, 0.5, (VOCAB, DIM)).astype(np.float32))
    batches = []
    for _ in range(steps):
        index = torch.from_numpy(rng.zipf(1.5, size=(12, 3)) % VOCAB)
        batches.append((index, torch.einsum("bfd,fd->b", hidden[index], HEAD)))
    return batches


def _loss(rows: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # rows [B, F, dim]: a fixed bilinear head over the fields, squared error.
    pred = torch.einsum("bfd,fd->b", rows, HEAD)
    return ((pred - target) ** 2).mean()


def test_gradients_and_updates_match_nn_embedding_for_50_sgd_steps(
    strategy: ParameterServerStrategy,
) -> None:
    table = _table(strategy, "equivalence")
    ps_ids = torch.from_numpy(IDS)
    local = nn.Embedding(VOCAB, DIM)
    with torch.no_grad():  # the PS table's lazily created rows are the start
        local.weight.copy_(torch.from_numpy(table.lookup(IDS)))
    optimizer = torch.optim.SGD(local.parameters(), lr=LR)
    layer = PSEmbedding(table)

    ps_losses, local_losses = [], []
    for index, target in _batches(50):
        loss = _loss(layer(ps_ids[index]), target)
        loss.backward()
        layer.flush()
        ps_losses.append(loss.item())

        optimizer.zero_grad()
        reference = _loss(local(index), target)
        reference.backward()
        optimizer.step()
        local_losses.append(reference.item())

    np.testing.assert_allclose(ps_losses, local_losses, rtol=0, atol=1e-5)
    assert ps_losses[-1] < 0.5 * ps_losses[0]  # it learned something
    np.testing.assert_allclose(table.lookup(IDS), local.weight.detach().numpy(), atol=1e-5)


def test_one_pull_of_unique_ids_and_one_summed_push_per_forward(
    strategy: ParameterServerStrategy, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(strategy, "calls")
    pulls: list[np.ndarray] = []
    pushes: list[tuple[np.ndarray, np.ndarray, bool]] = []
    lookup, push = EmbeddingTable.lookup_async, EmbeddingTable.push_gradients_async

    def spy_lookup(self: EmbeddingTable, ids: np.ndarray, unique: bool = False) -> Any:
        pulls.append(np.array(ids))
        return lookup(self, ids, unique)

    def spy_push(
        self: EmbeddingTable, ids: np.ndarray, grads: np.ndarray, unique: bool = False
    ) -> Any:
        pushes.append((np.array(ids), np.array(grads), unique))
        return push(self, ids, grads, unique)

    monkeypatch.setattr(EmbeddingTable, "lookup_async", spy_lookup)
    monkeypatch.setattr(EmbeddingTable, "push_gradients_async", spy_push)

    ids = torch.tensor([[[5, 9], [5, 5]], [[1, 9], [7, 5]]])  # any shape, repeats
    layer = PSEmbedding(table)
    rows = layer(ids)
    assert rows.shape == (2, 2, 2, DIM) and rows.dtype == torch.float32
    assert len(pulls) == 1 and pulls[0].tolist() == [1, 5, 7, 9]
    np.testing.assert_array_equal(rows[0, 1, 1].detach(), rows[1, 1, 1].detach())  # id 5 twice

    weights = torch.arange(rows.numel(), dtype=torch.float32).reshape(rows.shape)
    (rows * weights).sum().backward()
    layer.flush()
    ((pushed_ids, grads, unique),) = pushes
    assert unique and pushed_ids.tolist() == [1, 5, 7, 9]
    flat_ids, flat_w = ids.reshape(-1).numpy(), weights.reshape(-1, DIM).numpy()
    for row, i in enumerate(pushed_ids):
        np.testing.assert_allclose(grads[row], flat_w[flat_ids == i].sum(axis=0))


def test_prefetch_is_used_by_the_forward_with_equal_ids(
    strategy: ParameterServerStrategy, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(strategy, "prefetch")
    layer = PSEmbedding(table)
    ids = torch.tensor([3, 1, 3, 8])
    expected = layer(ids).detach().clone()
    calls = 0
    lookup = EmbeddingTable.lookup_async

    def counting(self: EmbeddingTable, ids: np.ndarray, unique: bool = False) -> Any:
        nonlocal calls
        calls += 1
        return lookup(self, ids, unique)

    monkeypatch.setattr(EmbeddingTable, "lookup_async", counting)
    layer.prefetch(ids.clone())
    assert calls == 1
    torch.testing.assert_close(layer(ids), expected)
    assert calls == 1  # served by the prefetch
    layer(torch.tensor([3, 1, 3, 9]))
    assert calls == 2  # other ids: a pull of their own


def test_no_push_without_grad_and_binding_errors(
    strategy: ParameterServerStrategy, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(strategy, "nograd")
    monkeypatch.setattr(
        EmbeddingTable, "push_gradients_async", lambda *a, **k: pytest.fail("pushed")
    )
    with torch.no_grad():
        rows = PSEmbedding(table)(torch.tensor([1, 2]))
    assert not rows.requires_grad

    unbound = PSEmbedding(dim=DIM)
    with pytest.raises(RuntimeError, match=r"bind\(table\)"):
        unbound(torch.tensor([1]))
    assert unbound.bind(table) is unbound and unbound(torch.tensor([1])).shape == (1, DIM)
    with pytest.raises(ValueError, match="rows of 8"):
        PSEmbedding(dim=4).bind(table)
    with pytest.raises(TypeError, match="integer"):
        unbound(torch.tensor([1.0]))
