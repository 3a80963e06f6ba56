"""The coordinator's side of checkpoints: resume from the newest one, save on a schedule.

A job started again with the same checkpoint directory (TRAINHUB_CHECKPOINT_DIR, which
the agent and `launch --checkpoint-dir` set for every task) restores variables and
optimizer slots on the PS shards and continues from the step saved in the manifest; the
platform relies on this to restart a job after a PS loss or a preemption.

A preempted coordinator gets SIGTERM and a grace period: a training loop that polls
`stop_requested()` between steps can then save exactly where it is with `save_and_stop()`
and exit 0 (see `ps_runtime.coordinator.stop_request`).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, NoReturn

from ps_runtime import taskenv
from ps_runtime.coordinator import stop_request
from ps_runtime.coordinator.stop_request import StopRequested
from ps_runtime.reporting import phase
from ps_runtime.server import checkpoint

log = logging.getLogger(__name__)

DEFAULT_EVERY_SECONDS = 300.0


class CheckpointManager:
    """Saves the strategy's variables every `every_seconds` (and when asked) and restores
    the newest committed checkpoint on start.

    Args:
        strategy: the ParameterServerStrategy whose PS shards hold the variables.
        directory: the checkpoint root shared with the PS shards (default:
            $TRAINHUB_CHECKPOINT_DIR; unset there too disables checkpoints).
        every_seconds: minimum time between periodic saves (default:
            $TRAINHUB_CHECKPOINT_EVERY_SECONDS, else 300).
        keep: how many committed checkpoints to keep.
    """

    def __init__(
        self,
        strategy: Any,
        directory: str | None = None,
        every_seconds: float | None = None,
        keep: int = 3,
    ) -> None:
        self.strategy = strategy
        self.directory = directory or taskenv.CHECKPOINT_DIR.read()
        if every_seconds is None:
            # 0 is a real setting (a checkpoint at every opportunity), so only unset
            # falls back to the default.
            configured = taskenv.CHECKPOINT_EVERY_SECONDS.read()
            every_seconds = DEFAULT_EVERY_SECONDS if configured is None else configured
        self.every_seconds = every_seconds
        self.keep = keep
        self._last_save = time.monotonic()
        self._cooperative = False  # stop_requested() opted in to cooperative SIGTERM

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def restore_or_initialize(self) -> int:
        """Restore the newest committed checkpoint if there is one; return its step (or 0).

        Create the variables first, exactly as a fresh start does.
        """
        if not self.enabled:
            return 0
        assert self.directory is not None
        newest = checkpoint.latest(self.directory)
        if newest is None:
            log.info("no checkpoint under %s; starting from step 0", self.directory)
            return 0
        step = int(checkpoint.read_manifest(newest)["step"])
        with phase("checkpoint"):  # no training steps meanwhile: not a stall
            self.strategy.restore_checkpoint(os.path.basename(newest))
        log.warning("resumed from checkpoint %s at step %d", newest, step)
        print(f"resumed from checkpoint {os.path.basename(newest)} at step {step}", flush=True)
        return step

    def maybe_save(self, step: int, force: bool = False) -> bool:
        """Save if `every_seconds` passed since the last save (or `force`); True if saved.

        Call it between steps with nothing in flight (after `join()`), so the saved values
        belong to exactly `step` steps.
        """
        if not self.enabled:
            return False
        if not force and time.monotonic() - self._last_save < self.every_seconds:
            return False
        self._save(step)
        return True

    def stop_requested(self) -> bool:
        """True once the task was asked to stop (SIGTERM); call it after every step.

        The first call (with checkpoints enabled, under `python -m ps_runtime.task`) tells
        the task that this loop stops cooperatively: SIGTERM then no longer interrupts the
        step but waits for the loop to `join()` and call `save_and_stop(step)`. Without a
        checkpoint directory it is always False and SIGTERM ends the task at once.
        """
        if not self._cooperative:
            if not self.enabled:
                return False
            self._cooperative = stop_request.opt_in(self.strategy.cluster_resolver.unavailable_ps)
        return stop_request.requested()

    def save_and_stop(self, step: int) -> NoReturn:
        """Save a checkpoint at `step` and end the entrypoint: the task exits 0.

        Call it when `stop_requested()` is True, after `join()`.

        Raises:
            StopRequested: always, once the checkpoint is committed.
            RuntimeError: checkpoints are disabled (no checkpoint directory).
        """
        if not self.enabled:
            raise RuntimeError(
                "save_and_stop() needs a checkpoint directory: pass directory= or set "
                f"{taskenv.CHECKPOINT_DIR.name}; stop_requested() is never True without one"
            )
        name = self._save(step)
        stop_request.settle()
        raise StopRequested(step, name)

    def _save(self, step: int) -> str:
        name = f"step-{step:012d}"
        with phase("checkpoint"):  # no training steps meanwhile: not a stall
            self.strategy.save_checkpoint(name, step=step, keep=self.keep)
        self._last_save = time.monotonic()
        log.info("saved checkpoint %s", name)
        return name
