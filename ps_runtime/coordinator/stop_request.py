"""A coordinator asked to stop (SIGTERM) saves a checkpoint first, if its entrypoint can.

`python -m ps_runtime.task` installs `on_sigterm` for the coordinator. Until the entrypoint
opts in, and on any second SIGTERM, the handler raises `Terminated` at once (exit 143). An
entrypoint opts in through its `CheckpointManager.stop_requested()` (with checkpoints
enabled): from then on the first SIGTERM only records the request; the training loop sees
it at its next step boundary, joins, saves and raises `StopRequested`, which the task
turns into exit 0.

While such a stop is pending, a watchdog checks the parameter servers every half second:
when one is gone (three failed checks in a row; a cancel stops them together with the
coordinator) no checkpoint can be saved, so the main thread gets `Terminated` at once
instead of waiting for its closures until the agent's SIGKILL.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType

log = logging.getLogger(__name__)

WATCH_SECONDS = 0.5
STRIKES = 3

# (shard index, address) of every parameter server that does not answer.
UnavailablePS = Callable[[], Sequence[tuple[int, str]]]


class Terminated(BaseException):
    """Raised in the coordinator's main thread on a SIGTERM it will not handle cooperatively."""


class StopRequested(BaseException):
    """The entrypoint stopped on request after saving checkpoint `checkpoint` at `step`."""

    def __init__(self, step: int, checkpoint: str) -> None:
        super().__init__(f"stopped on request at step {step} after saving checkpoint {checkpoint}")
        self.step = step
        self.checkpoint = checkpoint


_lock = threading.Lock()  # guards _installed, _unavailable_ps and _watchdog
_installed = False
_unavailable_ps: UnavailablePS | None = None  # set once the entrypoint opted in
_watchdog: threading.Thread | None = None
_sigterms = 0  # only touched by the handler, which runs in the main thread
_requested = threading.Event()  # a cooperative SIGTERM arrived
_abandoned = threading.Event()  # the watchdog gave up saving: the next SIGTERM terminates
_settled = threading.Event()  # the checkpoint is saved: the watchdog has nothing to guard


def install() -> None:
    """Handle SIGTERM in this process as the module docstring says (main thread only)."""
    global _installed
    signal.signal(signal.SIGTERM, on_sigterm)
    with _lock:
        _installed = True


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    """The SIGTERM handler: record a cooperative stop request, or raise `Terminated`."""
    global _sigterms
    _sigterms += 1
    # No logging or printing here: the main thread may be inside the same stream's write.
    if _unavailable_ps is None or _sigterms > 1 or _abandoned.is_set():
        raise Terminated()
    _requested.set()


def opt_in(unavailable_ps: UnavailablePS) -> bool:
    """Make the next SIGTERM a stop request the caller will act on; False (and nothing
    changes) when the process does not run under `python -m ps_runtime.task`.

    Args:
        unavailable_ps: the parameter servers that do not answer; while a stop is pending
            the watchdog calls it, and gives up on saving when it names any.
    """
    global _unavailable_ps, _watchdog
    with _lock:
        if not _installed:
            return False
        if _unavailable_ps is None:
            _unavailable_ps = unavailable_ps
            _watchdog = threading.Thread(
                target=_watch, args=(unavailable_ps,), daemon=True, name="stop-watchdog"
            )
            _watchdog.start()
    return True


def requested() -> bool:
    """True once a cooperative SIGTERM arrived."""
    return _requested.is_set()


def settle() -> None:
    """The requested checkpoint is saved: stop watching the parameter servers."""
    _settled.set()


def _watch(unavailable_ps: UnavailablePS) -> None:
    _requested.wait()
    log.warning(
        "SIGTERM: stopping at the next step boundary after saving a checkpoint "
        "(a second SIGTERM stops at once, without one)"
    )
    strikes = 0
    while not _settled.wait(WATCH_SECONDS):
        try:
            down = list(unavailable_ps())
        except Exception:
            log.exception("cannot check the parameter servers")
            continue
        # A PS slow to answer on a loaded node is not gone: give up on the checkpoint only
        # when checks fail STRIKES times in a row (a stopped PS refuses at once).
        strikes = strikes + 1 if down else 0
        if strikes >= STRIKES and not _settled.is_set():
            shard, address = down[0]
            log.error(
                "parameter server %d at %s is unavailable: stopping without a checkpoint",
                shard,
                address,
            )
            _abandoned.set()
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
            return


def _reset_for_tests() -> None:
    """Forget every request and opt-in (the watchdog thread, if any, is left to exit)."""
    global _installed, _unavailable_ps, _watchdog, _sigterms
    _settled.set()
    _requested.set()  # wake a watchdog still waiting for a request, so it ends
    with _lock:
        watchdog, _watchdog = _watchdog, None
        _installed, _unavailable_ps, _sigterms = False, None, 0
    if watchdog is not None:
        watchdog.join(5.0)
    _requested.clear()
    _abandoned.clear()
    _settled.clear()
