"""The policy's kept sums of what held jobs take (`policy/tally.py`): a cycle state built
from them decides exactly as one built by walking every task, however often the same jobs
come back, with a pending job added (a dry run) or after another set in between."""

from __future__ import annotations

import copy
from dataclasses import replace

from hypothesis import given, settings
from trainhub.scheduling.policy import (
    PENDING,
    Decisions,
    ModelResources,
    Snapshot,
    schedule,
    tally,
)
from trainhub.scheduling.policy.state import CycleState

from .driver import apply
from .strategies import clusters


def _fresh(snapshot: Snapshot, until: int | None = None) -> Decisions:
    tally._kept.clear()
    return schedule(snapshot, until=until)


def _busy(snapshot: Snapshot) -> Snapshot:
    """`snapshot` after two cycles: some jobs run, the rest wait."""
    for step in range(2):
        snapshot = apply(snapshot, schedule(snapshot), float(step * 10))
        snapshot = replace(snapshot, now=float(step * 10 + 10))
    return snapshot


@given(clusters())
@settings(max_examples=60, deadline=None)
def test_kept_sums_decide_as_a_fresh_walk(base: Snapshot) -> None:
    snap = _busy(base)
    expected = _fresh(snap)
    pending = [j for j in snap.jobs if j.state == PENDING]
    # The same jobs again, and again after their state was used and changed by a run.
    assert schedule(snap) == expected
    assert schedule(snap) == expected
    assert tally._kept and max(t.hits for t in tally._kept) >= 2
    # Another set of jobs in between (a forecast's run), then the first set again.
    fewer = replace(snap, jobs=snap.jobs[1:])
    on_fewer = schedule(fewer)
    assert schedule(snap) == expected
    assert on_fewer == _fresh(fewer)
    # The same jobs on other nodes (a node grew): their sums are not those kept.
    grown = replace(snap, nodes=tuple(replace(n, capacity=n.capacity.times(2)) for n in snap.nodes))
    assert schedule(grown) == _fresh(grown)
    # A pending job added, as a dry run does: the held jobs are the same ones.
    if pending:
        extra = replace(pending[0], id=-1, submit_time=snap.now, pending_since=snap.now)
        asked = replace(snap, jobs=(*snap.jobs, extra))
        schedule(snap)
        assert schedule(asked, until=-1) == _fresh(asked, until=-1)


def _state(snapshot: Snapshot) -> tuple[object, ...]:
    st = CycleState.build(snapshot)
    c = st.cap
    running = {k: (r.tasks, r.next_worker_index, r.workers) for k, r in st.running.items()}
    # A deep copy: what it holds may be shared with the kept sums.
    return copy.deepcopy((c.cpu, c.mem, c.gpu, c.teams, c.model_free, running, st.book.used))


@given(clusters())
@settings(max_examples=60, deadline=None)
def test_a_run_changes_no_kept_sum(base: Snapshot) -> None:
    """On nodes without isolation (teams counted per node) and GPUs of one model (counted
    per model): runs that start, grow and preempt leave the kept sums as they were."""
    nodes = tuple(
        replace(n, isolated=False, gpu_models={"a100": int(n.capacity.gpu)} if n.has_gpus else {})
        for n in base.nodes
    )
    jobs = tuple(
        replace(j, worker=ModelResources(j.worker.cpu, j.worker.memory_mb, j.worker.gpu, "a100"))
        if j.worker.gpu
        else j
        for j in base.jobs
    )
    snap = apply(
        replace(base, nodes=nodes, jobs=jobs), schedule(replace(base, nodes=nodes, jobs=jobs)), 0.0
    )
    # Alone (the running grow), then with as many jobs again waiting (they start, preempt).
    more = tuple(replace(j, id=j.id + 100) for j in base.jobs)
    for waiting in ((), more):
        at = replace(snap, now=10.0, jobs=(*snap.jobs, *waiting))
        tally._kept.clear()
        expected = _state(at)
        schedule(at)
        schedule(at)
        assert _state(at) == expected
