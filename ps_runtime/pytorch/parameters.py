"""Dense parameters of any torch module on the PS: ONE flat float32 variable per module.

The coordinator creates it from a module (`PSParameters.create`: the parameters
flattened and concatenated in `named_parameters()` order, an optimizer applied on the
PS, element-wise, so the flat variable trains as the separate ones would for SGD,
Adagrad and Adam); larger than the strategy's partitioning threshold, it is a
partitioned `Variable` (parts sliced along axis 0 across the shards). It travels into
closures as a mapping (the variable's handle and the layout: names and shapes) through
the same JSON codec as every handle. A worker binds it to its own copy of the module
(`PSParameters(received).bind(module)`): the parameters' `.data` become views of one
flat buffer, so each step is one pull (into that buffer; on CUDA a pinned host buffer
and one non-blocking copy to the device buffer) and one push (the gradients
concatenated). All state stays on the PS, so checkpoints, elasticity, replication and
preemption work as for any variable. Buffers (e.g. batch-norm statistics) are not
parameters: they stay in each process.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch import nn

from ps_runtime.coordinator.strategy import ParameterServerStrategy, current_strategy
from ps_runtime.coordinator.variables import Variable
from ps_runtime.pytorch import staging
from ps_runtime.server.optimizers import Optimizer

_pool_lock = threading.Lock()  # guards _pool
_pool: ThreadPoolExecutor | None = None


def _pusher() -> ThreadPoolExecutor:
    """The process's threads for dense pushes (a push is a blocking call with retries)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ps-torch-push")
        return _pool


class PSParameters(Mapping[str, Any]):
    """A module's parameters as one flat PS variable, and their layout.

    A `Mapping` with two keys, `"variable"` (the flat `Variable`) and `"layout"`
    (`[[parameter name, shape], ...]` in `named_parameters()` order): pass it in closure
    arguments and it arrives on the worker as a dict; `PSParameters(that_dict).bind(module)`
    binds it. `read()` gives the current values by parameter name.
    """

    def __init__(self, wire: Mapping[str, Any]) -> None:
        variable = wire["variable"]
        if not isinstance(variable, Variable):
            raise TypeError(f"PSParameters needs a Variable handle, got {type(variable).__name__}")
        self.variable: Variable = variable
        self.layout: list[tuple[str, tuple[int, ...]]] = [
            (str(n), tuple(int(d) for d in shape)) for n, shape in wire["layout"]
        ]
        sizes = [int(np.prod(shape, dtype=np.int64)) for _, shape in self.layout]
        self.offsets = [0, *np.cumsum(sizes).tolist()]
        if self.variable.shape != (self.offsets[-1],):
            raise ValueError(
                f"variable {self.variable.name!r} has shape {self.variable.shape}, the "
                f"layout {self.offsets[-1]} elements"
            )

    @classmethod
    def create(
        cls,
        module: nn.Module,
        name: str,
        *,
        strategy: ParameterServerStrategy | None = None,
        optimizer: Optimizer | None = None,
    ) -> PSParameters:
        """Create the PS variable `name` holding every parameter of `module` (float32,
        flattened and concatenated in `named_parameters()` order), initialised to their
        current values (or attach to an identical existing one). Above the strategy's
        partitioning threshold it is split along axis 0 across the shards.

        Args:
            module: the model as built on the coordinator (seed torch for a known start).
            name: the variable's name, unique in the job.
            strategy: where to create it (default: the active `strategy.scope()`).
            optimizer: applied on the PS, element-wise (default: the strategy's).

        Raises:
            ValueError: the module has no parameters.
            TypeError: a parameter is not float32.
        """
        strategy = strategy or current_strategy()
        params = list(module.named_parameters())
        if not params:
            raise ValueError(f"{type(module).__name__} has no parameters to put on the PS")
        _check_float32(params)
        flat = np.concatenate([p.detach().cpu().reshape(-1).numpy() for _, p in params])
        variable = strategy.create_variable(
            name, initial_value=flat, dtype=np.float32, optimizer=optimizer
        )
        return cls({"variable": variable, "layout": [[n, list(p.shape)] for n, p in params]})

    def _wire(self) -> dict[str, Any]:
        return {"variable": self.variable, "layout": [[n, list(s)] for n, s in self.layout]}

    def __getitem__(self, key: str) -> Any:
        return self._wire()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(("variable", "layout"))

    def __len__(self) -> int:
        return 2

    def __repr__(self) -> str:
        return f"PSParameters({self.variable.name!r}, {[n for n, _ in self.layout]})"

    @property
    def names(self) -> list[str]:
        """The parameters' names, in the flat variable's order."""
        return [n for n, _ in self.layout]

    def read(self) -> dict[str, np.ndarray]:
        """The current values on the PS, by parameter name (views of one pulled array)."""
        flat = self.variable.read()
        values = {}
        for (n, shape), a in zip(self.layout, self.offsets[:-1], strict=True):
            values[n] = flat[a : a + math.prod(shape)].reshape(shape)
        return values

    def bind(self, module: nn.Module, *, sync_every: int = 1) -> BoundParameters:
        """This module's binding to the variable, made once per module and rebound to
        the current handle on every later call (buffers and accumulated gradients kept).
        Binding makes the parameters' `.data` views of one flat buffer (on their device).

        Args:
            module: a copy of the model the variable was created from.
            sync_every: k > 1 accumulates k steps of gradients here and pushes their
                sum, pulling again only after that push (delayed updates, fewer calls).

        Raises:
            ValueError: the module's parameters differ from the layout in name or shape,
                or sit on more than one device.
        """
        with _bindings_lock:
            bound = _bindings.get(module)
            if bound is None or bound.sync_every != sync_every or bound.moved():
                bound = _bindings[module] = BoundParameters(module, self, sync_every)
            else:
                bound.rebind(self)
            return bound


def _check_float32(params: Sequence[tuple[str, nn.Parameter]]) -> None:
    other = [f"{n}: {p.dtype}" for n, p in params if p.dtype != torch.float32]
    if other:
        raise TypeError(f"PS parameters are one float32 variable; these are not: {other}")


_bindings_lock = threading.Lock()  # guards _bindings
_bindings: weakref.WeakKeyDictionary[nn.Module, BoundParameters] = weakref.WeakKeyDictionary()


class BoundParameters:
    """A module's parameters bound to their flat PS variable, for one training loop.

    Binding points every parameter's `.data` at its slice of one flat buffer on the
    parameters' device. Each step: `pull()` before forward (one pull of the flat value:
    straight into that buffer on the CPU; on CUDA into a pinned host buffer, then one
    non-blocking copy), `push()` after backward (the gradients concatenated into one
    array, one push; it clears `.grad`, as `zero_grad(set_to_none=True)` does),
    `flush()` before the step returns. Pushes run in the background. A parameter
    without a gradient contributes zeros (a no-op for SGD and Adagrad; Adam's moments
    still decay); a step without any gradient pushes nothing. Pulls write the module's
    own tensors, so one step at a time per module: run such steps with
    `max_in_flight_per_worker=1` (the examples do) or give each thread its own module.
    """

    def __init__(self, module: nn.Module, params: PSParameters, sync_every: int) -> None:
        if sync_every < 1:
            raise ValueError(f"sync_every must be at least 1, got {sync_every}")
        self.module = module
        self.sync_every = sync_every
        self._lock = threading.Lock()  # guards _pushes, _since_sync and _accumulated
        self._pushes: list[Future[int]] = []
        self._since_sync = 0  # steps whose gradients are accumulated here, not pushed
        self._accumulated: np.ndarray | None = None
        self._landed: torch.cuda.Event | None = None  # the last pull's copy to the GPU
        named = list(module.named_parameters())
        self._check(named, params)
        _check_float32(named)
        devices = {p.device for _, p in named}
        if len(devices) != 1:
            raise ValueError(f"the module's parameters are on several devices: {devices}")
        (device,) = devices
        self._params = [p for _, p in named]
        self._offsets = params.offsets
        self.variable = params.variable
        total = self._offsets[-1]
        # The flat buffer whose slices are the parameters (copied in: values kept).
        self._flat = torch.empty(total, dtype=torch.float32, device=device)
        for p, a, b in zip(self._params, self._offsets[:-1], self._offsets[1:], strict=True):
            view = self._flat[a:b].view(p.shape)
            view.copy_(p.detach())
            p.data = view
        self._device = device if staging.is_cuda(device) else None  # where pulls' copies go
        self._staging: torch.Tensor | None = None
        if self._device is not None:
            self._staging = torch.empty(total, dtype=torch.float32, pin_memory=True)
            self._host: np.ndarray = self._staging.numpy()
        else:
            self._host = self._flat.numpy()  # pulls write the parameters' memory
        self._where = [(p.device, p.data_ptr()) for p in self._params]

    @staticmethod
    def _check(named: Sequence[tuple[str, nn.Parameter]], params: PSParameters) -> None:
        layout = dict(params.layout)
        names = [n for n, _ in named]
        missing = sorted(set(layout) - set(names))
        unexpected = sorted(set(names) - set(layout))
        wrong = [
            f"{n}: module {tuple(p.shape)}, PS {layout[n]}"
            for n, p in named
            if n in layout and tuple(p.shape) != layout[n]
        ]
        order = not (missing or unexpected) and names != params.names
        if missing or unexpected or wrong or order:
            raise ValueError(
                "the module's parameters differ from the PS variable's layout (build the "
                "worker's module with the coordinator's configuration): "
                f"missing {missing}, unexpected {unexpected}, shapes {wrong}"
                + (f", order {names} vs {params.names}" if order else "")
            )

    @property
    def flat(self) -> torch.Tensor:
        """The flat buffer the parameters are views of (on their device)."""
        return self._flat

    def moved(self) -> bool:
        """True when a parameter's memory changed since binding (e.g. `module.to(...)`)."""
        return [(p.device, p.data_ptr()) for p in self._params] != self._where

    def rebind(self, params: PSParameters) -> None:
        """Use this handle (same layout) from now on."""
        if params.offsets != self._offsets:
            raise ValueError(f"{params!r} has another layout than this binding")
        self.variable = params.variable

    @property
    def steps_since_sync(self) -> int:
        """Steps whose gradients are accumulated here and not pushed yet."""
        return self._since_sync

    def pull(self) -> bool:
        """Copy the PS value into the module's parameters: one pull.

        With `sync_every` k > 1, pulls only when no gradient is accumulated here (the
        module keeps the values of its last sync in between). Returns whether it pulled.
        """
        if self._since_sync:
            return False
        self._wait_pushes()  # read this worker's own updates
        if self._landed is not None:
            self._landed.synchronize()  # the pinned buffer is free to overwrite
        variable = self.variable
        direct = bool(variable.parts) or variable.nbytes > variable.client.chunk_bytes
        value = variable.read_async(out=self._host if direct else None).result()
        if value is not self._host:
            np.copyto(self._host, value.reshape(-1))
        if self._staging is not None and self._device is not None:
            self._flat.copy_(self._staging, non_blocking=True)
            self._landed = torch.cuda.current_stream(self._device).record_event()
        return True

    def _gradient(self) -> np.ndarray | None:
        """The gradients as one new flat host array (zeros where a parameter has none),
        or None when no parameter has one; clears them."""
        grads = [p.grad for p in self._params]
        for p in self._params:
            p.grad = None
        if all(g is None for g in grads):
            return None
        flat = torch.cat(
            [
                (g if g is not None else torch.zeros_like(p)).reshape(-1)
                for p, g in zip(self._params, grads, strict=True)
            ]
        )
        return staging.to_host(flat)

    def push(self) -> bool:
        """Send the gradients (async, one push) and clear them; returns whether it sent
        (False while accumulating toward `sync_every`)."""
        self._wait_pushes()  # one step's push in flight at a time (back-pressure)
        grad = self._gradient()
        if self.sync_every == 1:
            self._send(grad)
            return True
        with self._lock:
            if grad is not None:
                if self._accumulated is None:
                    self._accumulated = grad.copy()
                else:
                    self._accumulated += grad
            self._since_sync += 1
            if self._since_sync < self.sync_every:
                return False
        self._push_accumulated()
        return True

    def sync(self) -> None:
        """Push what is accumulated now (e.g. at the end of training) and wait for it."""
        self._push_accumulated()
        self.flush()

    def _push_accumulated(self) -> None:
        with self._lock:
            grad, self._accumulated = self._accumulated, None
            self._since_sync = 0
        self._send(grad)

    def _send(self, grad: np.ndarray | None) -> None:
        if grad is None:
            return
        future = _pusher().submit(self.variable.push_gradient, grad)
        with self._lock:
            self._pushes.append(future)

    def _wait_pushes(self) -> None:
        with self._lock:
            pending, self._pushes = self._pushes, []
        for push in pending:
            push.result()

    def flush(self) -> None:
        """Wait until the PS applied every gradient pushed so far.

        Raises:
            grpc.RpcError: a push failed for good (after the client's retries).
        """
        self._wait_pushes()
