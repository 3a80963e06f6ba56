"""Every change to jobs and tasks, one function per state change, by concern:

- `transitions`: the guarded state machine, the event history, the errors;
- `submission`: submit, clone, scale and cancel (what owners do);
- `placement`: the scheduler's decisions (place, rescale, pending reasons);
- `batch_placement`: a cycle's starts of never-placed jobs, in a few queries;
- `reports`: what agents report about task processes, lost nodes;
- `restarts`: restarts in place or elsewhere, their backoff (`jobs.retries` decides);
- `preemption`: checkpoint, stop and requeue a running job.

Each publishes domain events (`trainhub.events`) for what happened; upper layers decide
what that means for browsers, agents and the scheduler.
"""

from __future__ import annotations

from .batch_placement import Start, place_jobs
from .placement import Placement, move_server, place_job, rescale_workers, set_pending_reasons
from .preemption import advance_preemption, preempt_job
from .reports import (
    nodes_with_unstarted_stops,
    record_task_status,
    release_lost_nodes,
    settle_unstarted_tasks,
)
from .restarts import release_due_restarts, restart_from_checkpoint
from .submission import cancel_job, check_submission, clone_job, scale_job, submit_job
from .transitions import JobStateError, PriorityCapExceeded, ScaleError, transition_job

__all__ = [
    "JobStateError",
    "Placement",
    "PriorityCapExceeded",
    "ScaleError",
    "Start",
    "advance_preemption",
    "cancel_job",
    "check_submission",
    "clone_job",
    "move_server",
    "nodes_with_unstarted_stops",
    "place_job",
    "place_jobs",
    "preempt_job",
    "record_task_status",
    "release_due_restarts",
    "release_lost_nodes",
    "rescale_workers",
    "restart_from_checkpoint",
    "scale_job",
    "set_pending_reasons",
    "settle_unstarted_tasks",
    "submit_job",
    "transition_job",
]
