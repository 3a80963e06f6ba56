"""Dense parameters of any torch module on the PS: one `Variable` per named parameter.

The coordinator creates them from a module (`PSParameters.create`: initial values from
the module, an optimizer applied on the PS); they travel into closures as a mapping of
variable handles, through the same JSON codec as every handle. A worker binds them to
its own copy of the module (`PSParameters(received).bind(module)`) and, each step,
pulls the values into the module's parameters, runs forward and backward, and pushes
the gradients (`pull`, `push`, `flush`). All state stays on the PS, so checkpoints,
elasticity, replication and preemption work as for any variable. Buffers (e.g.
batch-norm statistics) are not parameters: they stay in each process.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch
from torch import nn

from ps_runtime.coordinator.strategy import ParameterServerStrategy, current_strategy
from ps_runtime.coordinator.variables import PendingValue, Variable
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


class PSParameters(Mapping[str, Variable]):
    """The PS variables of a module's parameters, by parameter name (`module.named_parameters()`).

    A `Mapping[str, Variable]`: pass it in closure arguments and it arrives on the
    worker as a dict of handles; `PSParameters(that_dict).bind(module)` binds them.
    """

    def __init__(self, variables: Mapping[str, Variable]) -> None:
        self._variables = dict(variables)

    @classmethod
    def create(
        cls,
        module: nn.Module,
        name: str,
        *,
        strategy: ParameterServerStrategy | None = None,
        optimizer: Optimizer | None = None,
    ) -> PSParameters:
        """Create a PS variable `name/<parameter name>` for every parameter of `module`,
        initialised to its current value (or attach to an identical existing one).

        Args:
            module: the model as built on the coordinator (seed torch for a known start).
            name: the prefix of the variables' names, unique in the job.
            strategy: where to create them (default: the active `strategy.scope()`).
            optimizer: applied on the PS (default: the strategy's).
        """
        strategy = strategy or current_strategy()
        variables = {
            pname: strategy.create_variable(
                f"{name}/{pname}",
                initial_value=param.detach().cpu().numpy(),
                dtype=staging.numpy_dtype(param.dtype),
                optimizer=optimizer,
            )
            for pname, param in module.named_parameters()
        }
        if not variables:
            raise ValueError(f"{type(module).__name__} has no parameters to put on the PS")
        return cls(variables)

    def __getitem__(self, key: str) -> Variable:
        return self._variables[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._variables)

    def __len__(self) -> int:
        return len(self._variables)

    def __repr__(self) -> str:
        return f"PSParameters({sorted(self._variables)})"

    def bind(self, module: nn.Module, *, sync_every: int = 1) -> BoundParameters:
        """This module's binding to these variables, made once per module and rebound to
        the current handles on every later call (buffers and accumulated gradients kept).

        Args:
            module: a copy of the model the variables were created from.
            sync_every: k > 1 accumulates k steps of gradients here and pushes their
                sum, pulling again only after that push (delayed updates, fewer calls).

        Raises:
            ValueError: the module's parameters differ from the variables in name or shape.
        """
        with _bindings_lock:
            bound = _bindings.get(module)
            if bound is None or bound.sync_every != sync_every or bound.moved():
                bound = _bindings[module] = BoundParameters(module, self, sync_every)
            else:
                bound.rebind(self)
            return bound


_bindings_lock = threading.Lock()  # guards _bindings
_bindings: weakref.WeakKeyDictionary[nn.Module, BoundParameters] = weakref.WeakKeyDictionary()


class _Slot:
    """One parameter and its variable, with the host array the values cross through:
    the parameter's own memory when it can take pulls directly (contiguous, on the CPU),
    else a buffer (pinned for CUDA) copied into the parameter after each pull."""

    def __init__(self, name: str, param: nn.Parameter, variable: Variable) -> None:
        self.name = name
        self.param = param
        self.variable = variable
        data = param.detach()
        self.where = (data.device, data.data_ptr())  # a moved module needs a new binding
        self.buffer: torch.Tensor | None = None
        if staging.is_cuda(data.device) or not data.is_contiguous():
            pinned = staging.is_cuda(data.device)
            self.buffer = torch.empty(data.shape, dtype=data.dtype, pin_memory=pinned)
            self.host: np.ndarray = self.buffer.numpy()
        else:
            self.host = data.numpy()  # the parameter's memory: pulls write into it
        self.accumulated: np.ndarray | None = None

    def pull_async(self) -> PendingValue:
        """Start pulling the value; large values stream straight into `host`."""
        streamed = self.variable.nbytes > self.variable.client.chunk_bytes
        return self.variable.read_async(out=self.host if streamed else None)

    def land(self, value: np.ndarray) -> None:
        """Put a pulled value into the parameter (non-blocking from pinned memory)."""
        if value is not self.host:
            np.copyto(self.host, value.reshape(self.host.shape))
        if self.buffer is not None:
            self.param.data.copy_(self.buffer, non_blocking=True)


class BoundParameters:
    """A module's parameters bound to their PS variables, for one training loop.

    Each step: `pull()` before forward, `push()` after backward (it clears `.grad`, as
    `zero_grad(set_to_none=True)` does), `flush()` before the step returns. Pushes run
    in the background; a parameter without a gradient is not pushed (as torch's
    optimizers skip it). Pulls write the module's own tensors, so one step at a time
    per module: run such steps with `max_in_flight_per_worker=1` (the examples do) or
    give each thread its own module.
    """

    def __init__(self, module: nn.Module, variables: Mapping[str, Variable], sync_every: int):
        if sync_every < 1:
            raise ValueError(f"sync_every must be at least 1, got {sync_every}")
        self.module = module
        self.sync_every = sync_every
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()  # guards _pushes, _since_sync and the accumulators
        self._pushes: list[Future[int]] = []
        self._since_sync = 0  # steps whose gradients are accumulated here, not pushed
        self._landed: torch.cuda.Event | None = None  # the last pull's copies to the GPU
        params = dict(module.named_parameters())
        self._check(params, variables)
        self._slots = [_Slot(n, params[n], variables[n]) for n in params]
        on_gpu = [p.device for p in params.values() if staging.is_cuda(p.device)]
        self._device = on_gpu[0] if on_gpu else None  # where the pulls' copies go

    @staticmethod
    def _check(params: Mapping[str, nn.Parameter], variables: Mapping[str, Variable]) -> None:
        missing = sorted(set(variables) - set(params))
        unexpected = sorted(set(params) - set(variables))
        wrong = [
            f"{n}: module {tuple(p.shape)}, PS {variables[n].shape}"
            for n, p in params.items()
            if n in variables and tuple(p.shape) != variables[n].shape
        ]
        if missing or unexpected or wrong:
            raise ValueError(
                "the module's parameters differ from the PS variables (build the worker's "
                "module with the coordinator's configuration): "
                f"missing {missing}, unexpected {unexpected}, shapes {wrong}"
            )

    def moved(self) -> bool:
        """True when a parameter's memory changed since binding (e.g. `module.to(...)`)."""
        return any((s.param.device, s.param.data_ptr()) != s.where for s in self._slots)

    def rebind(self, variables: Mapping[str, Variable]) -> None:
        """Use these handles (same names and shapes) from now on."""
        self._check({s.name: s.param for s in self._slots}, variables)
        for slot in self._slots:
            slot.variable = variables[slot.name]

    @property
    def steps_since_sync(self) -> int:
        """Steps whose gradients are accumulated here and not pushed yet."""
        return self._since_sync

    def pull(self) -> bool:
        """Copy the PS values into the module's parameters; all variables at once.

        With `sync_every` k > 1, pulls only when no gradient is accumulated here (the
        module keeps the values of its last sync in between). Returns whether it pulled.
        """
        if self._since_sync:
            return False
        self._wait_pushes()  # read this worker's own updates
        if self._landed is not None:
            self._landed.synchronize()  # pinned buffers are free to overwrite
        pending = [(slot, slot.pull_async()) for slot in self._slots]
        for slot, value in pending:
            slot.land(value.result())
        if self._device is not None:
            self._landed = torch.cuda.current_stream(self._device).record_event()
        return True

    def push(self) -> bool:
        """Send the gradients (async) and clear them; returns whether anything was sent
        (False while accumulating toward `sync_every`)."""
        self._wait_pushes()  # one step's pushes in flight at a time (back-pressure)
        grads = [(slot, slot.param.grad) for slot in self._slots]
        for slot, _ in grads:
            slot.param.grad = None
        present = [(slot, g) for slot, g in grads if g is not None]
        arrays = staging.to_host_all([g for _, g in present])
        host = [(slot, array) for (slot, _), array in zip(present, arrays, strict=True)]
        if self.sync_every == 1:
            self._send(host)
            return True
        with self._lock:
            for slot, g in host:
                if slot.accumulated is None:
                    slot.accumulated = g.copy()
                else:
                    slot.accumulated += g
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
            host = [(s, s.accumulated) for s in self._slots if s.accumulated is not None]
            for slot in self._slots:
                slot.accumulated = None
            self._since_sync = 0
        self._send(host)

    def _send(self, host: list[tuple[_Slot, np.ndarray]]) -> None:
        pool = _pusher()
        futures = [pool.submit(slot.variable.push_gradient, grad) for slot, grad in host]
        with self._lock:
            self._pushes.extend(futures)

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
