"""Dense parameters on the PS against plain torch SGD, and their trip into closures."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from ps_runtime.coordinator.cluster import LocalCluster
from ps_runtime.coordinator.cluster_coordinator import ClusterCoordinator
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.coordinator.variables import Variable, handle_from_wire
from ps_runtime.pytorch import PSParameters
from ps_runtime.server.optimizers import SGD
from ps_runtime.shards import sharding
from ps_runtime.wire.codec import decode_value, encode_value

LR = 0.1


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(num_ps=2, num_workers=1) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def strategy(cluster: LocalCluster) -> Iterator[ParameterServerStrategy]:
    strategy = ParameterServerStrategy(cluster.resolver)
    yield strategy
    strategy.close()


def build_model(seed: int) -> nn.Module:
    """A small MLP (module level: workers build it by reference)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))


def _data(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 1)).astype(np.float32)
    out = []
    for _ in range(steps):
        x = rng.normal(size=(32, 6)).astype(np.float32)
        out.append((torch.from_numpy(x), torch.from_numpy(np.sin(x @ w))))
    return out


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss: torch.Tensor = ((model(x) - y) ** 2).mean()
    return loss


def test_sgd_on_the_ps_matches_torch_sgd_for_50_steps(strategy: ParameterServerStrategy) -> None:
    model = build_model(seed=1)
    reference = copy.deepcopy(model)
    params = PSParameters.create(
        model, "equivalence", strategy=strategy, optimizer=SGD(learning_rate=LR)
    )
    assert params.names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert params.variable.shape == (6 * 16 + 16 + 16 + 1,)  # one flat variable
    worker_copy = build_model(seed=2)  # other values: the pull overwrites them
    bound = params.bind(worker_copy)
    optimizer = torch.optim.SGD(reference.parameters(), lr=LR)

    ps_losses, local_losses = [], []
    for x, y in _data(50):
        assert bound.pull()
        loss = _loss(worker_copy, x, y)
        loss.backward()
        assert bound.push()
        assert all(p.grad is None for p in worker_copy.parameters())  # cleared
        bound.flush()
        ps_losses.append(loss.item())

        optimizer.zero_grad()
        expected = _loss(reference, x, y)
        expected.backward()
        optimizer.step()
        local_losses.append(expected.item())

    np.testing.assert_allclose(ps_losses, local_losses, rtol=0, atol=1e-5)
    assert ps_losses[-1] < 0.5 * ps_losses[0]
    values = params.read()
    for name, param in reference.named_parameters():
        np.testing.assert_allclose(values[name], param.detach().numpy(), atol=1e-5)


def test_pull_lands_in_the_parameters_memory(strategy: ParameterServerStrategy) -> None:
    model = build_model(seed=3)
    params = PSParameters.create(model, "memory", strategy=strategy)
    worker_copy = build_model(seed=4)
    bound = params.bind(worker_copy)
    flat = bound.flat
    storage = {n: p.data_ptr() for n, p in worker_copy.named_parameters()}
    for param, offset in zip(worker_copy.parameters(), params.offsets, strict=False):
        assert param.data_ptr() == flat.data_ptr() + 4 * offset  # views of one flat buffer
    bound.pull()
    for name, param in worker_copy.named_parameters():
        assert param.data_ptr() == storage[name]  # the same tensors, refilled
        torch.testing.assert_close(param, dict(model.named_parameters())[name])


def test_sync_every_k_accumulates_like_local_gradient_accumulation(
    strategy: ParameterServerStrategy,
) -> None:
    model = build_model(seed=5)
    reference = copy.deepcopy(model)
    params = PSParameters.create(model, "sync3", strategy=strategy, optimizer=SGD(learning_rate=LR))
    worker_copy = build_model(seed=6)
    bound = params.bind(worker_copy, sync_every=3)
    optimizer = torch.optim.SGD(reference.parameters(), lr=LR)

    pulled, sent = [], []
    ps_losses, local_losses = [], []
    for step, (x, y) in enumerate(_data(12)):
        pulled.append(bound.pull())
        loss = _loss(worker_copy, x, y)
        loss.backward()
        sent.append(bound.push())
        bound.flush()
        ps_losses.append(loss.item())

        expected = _loss(reference, x, y)
        expected.backward()  # gradients add up over 3 steps, then one SGD step
        if step % 3 == 2:
            optimizer.step()
            optimizer.zero_grad()
        local_losses.append(expected.item())

    # Pulls at the start of each group of 3 steps, pushes their sum at its end.
    assert pulled == [True, False, False] * 4 and sent == [False, False, True] * 4
    np.testing.assert_allclose(ps_losses, local_losses, rtol=0, atol=1e-5)
    # A partial accumulation is pushed by sync().
    bound.pull()
    _loss(worker_copy, *_data(1)[0]).backward()
    assert not bound.push() and bound.steps_since_sync == 1
    before = params.read()["2.bias"].copy()
    bound.sync()
    assert bound.steps_since_sync == 0 and not np.array_equal(params.read()["2.bias"], before)


def test_binding_checks_names_and_shapes(strategy: ParameterServerStrategy) -> None:
    params = PSParameters.create(build_model(seed=7), "shapes", strategy=strategy)
    wider = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
    with pytest.raises(ValueError, match=r"0\.weight: module \(32, 6\), PS \(16, 6\)"):
        params.bind(wider)
    with pytest.raises(ValueError, match=r"missing \['2.bias', '2.weight'\]"):
        params.bind(nn.Sequential(nn.Linear(6, 16)))
    with pytest.raises(ValueError, match="no parameters"):
        PSParameters.create(nn.Tanh(), "none", strategy=strategy)
    with pytest.raises(TypeError, match="float32"):
        PSParameters.create(build_model(seed=7).double(), "doubles", strategy=strategy)


def bind_and_pull(seed: int, params: Mapping[str, Any]) -> float:
    """A closure: bind the handles it received to a fresh module, pull, sum the values."""
    model = build_model(seed)
    PSParameters(params).bind(model).pull()
    return float(sum(p.detach().sum() for p in model.parameters()))


def test_parameters_cross_into_closures_as_handles(
    cluster: LocalCluster, strategy: ParameterServerStrategy
) -> None:
    model = build_model(seed=8)
    params = PSParameters.create(model, "closure", strategy=strategy)
    text, tensors = encode_value([params])
    (received,) = decode_value(text, tensors, lambda d: handle_from_wire(d, strategy.ps_client))
    assert isinstance(received, dict) and set(received) == {"variable", "layout"}
    assert isinstance(received["variable"], Variable)
    assert PSParameters(received).layout == params.layout

    coordinator = ClusterCoordinator(strategy)
    try:
        total = coordinator.schedule(bind_and_pull, (9, params)).fetch()
    finally:
        coordinator.shutdown()
    assert total == pytest.approx(float(sum(p.detach().sum() for p in model.parameters())))


def test_a_module_whose_memory_moved_gets_a_new_binding(
    strategy: ParameterServerStrategy,
) -> None:
    model = build_model(seed=10)
    params = PSParameters.create(model, "moved", strategy=strategy)
    worker_copy = build_model(seed=11)
    first = params.bind(worker_copy)
    assert params.bind(worker_copy) is first  # cached: buffers and accumulators kept
    worker_copy.to(torch.float64).to(torch.float32)  # new tensors behind the same Parameters
    second = params.bind(worker_copy)
    assert second is not first
    second.pull()
    for name, param in worker_copy.named_parameters():
        torch.testing.assert_close(param, dict(model.named_parameters())[name])


def test_a_large_model_is_one_partitioned_variable(cluster: LocalCluster) -> None:
    """Above the partitioning threshold the flat variable is sliced across the shards."""
    strategy = ParameterServerStrategy(
        cluster.resolver, variable_partitioner=sharding.fixed_shards_partitioner(2)
    )
    try:
        model = build_model(seed=12)
        reference = copy.deepcopy(model)
        params = PSParameters.create(
            model, "parts", strategy=strategy, optimizer=SGD(learning_rate=LR)
        )
        assert len(params.variable.parts) == 2
        worker_copy = build_model(seed=13)
        bound = params.bind(worker_copy)
        optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
        for x, y in _data(5):
            bound.pull()
            _loss(worker_copy, x, y).backward()
            bound.push()
            bound.flush()
            optimizer.zero_grad()
            _loss(reference, x, y).backward()
            optimizer.step()
        values = params.read()
        for name, param in reference.named_parameters():
            np.testing.assert_allclose(values[name], param.detach().numpy(), atol=1e-5)
    finally:
        strategy.close()
