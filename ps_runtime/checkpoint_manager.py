"""The coordinator's side of checkpoints: resume from the newest one, save on a schedule.

A job started again with the same checkpoint directory (TRAINHUB_CHECKPOINT_DIR, which
the agent and `launch --checkpoint-dir` set for every task) restores variables and
optimizer slots on the PS shards and continues from the step saved in the manifest; the
platform relies on this to restart a job after a PS loss or a preemption.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from ps_runtime import checkpoint

log = logging.getLogger(__name__)

DIR_ENV = "TRAINHUB_CHECKPOINT_DIR"
EVERY_ENV = "TRAINHUB_CHECKPOINT_EVERY_SECONDS"


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

    def __init__(self, strategy: Any, directory: str | None = None,
                 every_seconds: float | None = None, keep: int = 3) -> None:
        self.strategy = strategy
        self.directory = directory or os.environ.get(DIR_ENV) or None
        if every_seconds is None:
            every_seconds = float(os.environ.get(EVERY_ENV) or 300)
        self.every_seconds = every_seconds
        self.keep = keep
        self._last_save = time.monotonic()

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
        self.strategy.save_checkpoint(f"step-{step:012d}", step=step, keep=self.keep)
        self._last_save = time.monotonic()
        log.info("saved checkpoint at step %d", step)
        return True
