"""Making room for a blocked pending job: move, shrink, then evict, then preempt.

Victims, in the order they are taken:
0. (reclaim only) a parameter server of a borrowing job with replicated shards, moved to
   another node with room for it (`units.move_units`): the job runs on, nobody loses
   work. Moves shift capacity between nodes and free none, so they help a job that
   fits the free capacity in total but finds no node for one of its tasks;
1. elastic jobs above their minimum, one worker at a time (nobody is preempted while a
   shrink can still help): for reclaim the most-fulfilled first; for fair share those of
   the team farthest above its fair share first;
2. for a GPU job: CPU-only jobs sitting on GPU nodes on borrowed quota;
3. (reclaim only) jobs running on borrowed quota.
Jobs to preempt are taken `reclaim_first` jobs first (an experiment's trials: they stop
at checkpoints anyway), then lowest priority, then the least work lost (time since
their last checkpoint), then the shortest run so far, then the smallest; but before each
preemption for reclaim, the first victims in that order (up to 64) are checked for
one whose preemption alone, beside what is taken, gives the job its room: such a victim
goes first whatever its priority or age (one preemption instead of several). A job
started on borrowed quota runs `min_borrowed_run_seconds` before anyone but the quota's
owner may preempt it, and the owner takes such young jobs only after all older ones
(unless one alone gives it its room).
A victim must belong to another team that is borrowing (reclaim: the job fits its own
team's nominal quota) or that is further above its fair share than the job's team would
be (fair share). Production jobs are never preempted or shrunk; frozen jobs are not
shrunk. Nothing is taken for a job that could not fit even on an empty cluster, and
victims are taken only if the job then fits; the capacity they free is reserved for the
job until it starts, so no other job can take it and cause another preemption.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import islice

from .model import Job, Resources
from .placement import Placed, TaskSpec
from .quota import Admission
from .reach import could_ever_host
from .state import CycleState, RunningJob, may_borrow_for
from .units import (
    Unit,
    give_back_unit,
    move_units,
    preempt_unit,
    record_unit,
    take_unit,
    worker_unit,
)
from .victims import eligible, fair_key_after, teams_giving_way, victims_of

MAX_VICTIM_UNITS = 256  # bounds the work of one attempt
SOLE_LOOKAHEAD = 32  # victims of each kind looked at for one that alone makes room
SOLE_TRIES = 64  # victims checked fully in that search, per attempt
SOLE_ATTEMPTS = 8  # attempts per cycle that search (bounds a cycle's work, as attempts do)


def _opens(st: CycleState, unit: Unit, job: Job, shapes: list[Resources]) -> bool:
    """Whether moving the unit's server lets its node take a task of `job` it cannot take
    now (for want of room, or because the node is the mover's team's alone)."""
    ((pos, _),) = unit.tasks
    blocked = [r for r in shapes if not st.cap.could_take(pos, job.team, [r])]
    if not blocked:
        return False
    mark = st.cap.mark()
    take_unit(st, unit)
    try:
        return st.cap.could_take(pos, job.team, blocked)
    finally:
        give_back_unit(st, unit)
        st.cap.restored(mark)


@dataclass
class _Sole:
    """A search for one victim whose preemption alone, beside the units already taken,
    gives the job its room; `test` spends one of `tries` on each victim it checks fully."""

    test: Callable[[Unit], bool]
    tries: int = SOLE_TRIES


def _candidates(
    st: CycleState, job: Job, reclaim: bool, sole_search: _Sole | None = None
) -> Iterator[Unit]:
    """Victim units in order, lazily (each one taken before the next is computed)."""
    key = (0, 0.0) if reclaim else fair_key_after(st, job)
    teams = teams_giving_way(st, job, reclaim, key)
    if not teams:
        return
    victims = victims_of(st)

    def usable(rj: RunningJob) -> bool:
        return not rj.touched and not rj.gone and rj.job.team in teams

    now, min_run = st.snapshot.now, st.snapshot.config.min_borrowed_run_seconds

    def young(rj: RunningJob) -> bool:
        started = rj.job.started_at
        return started is not None and now - started < min_run and any(t.borrowed for t in rj.tasks)

    def shrink_order(rj: RunningJob) -> tuple[float, float, int, RunningJob]:
        # Reclaim: the most-fulfilled borrower first. Fair share: the job whose team is
        # farthest above its fair share first, then the most-fulfilled.
        above = 0.0 if reclaim else -st.book.fair_key(rj.job.team)[1]
        return (above, -rj.workers / rj.job.workers_max, rj.job.id, rj)

    moved: set[int] = set()
    if reclaim:
        # A move loses no work: first, one server per job, from a node that could then
        # take one of the job's tasks.
        shapes = list({res.as_tuple(): res for _, _, res in job.gang()}.values())
        for rj in victims.movable:
            if not usable(rj) or not eligible(st, rj, job, reclaim, key):
                continue
            helps = (u for u in move_units(st, rj) if _opens(st, u, job, shapes))
            unit = next(helps, None)
            if unit is not None:
                moved.add(rj.job.id)  # not preempted in this attempt as well
                yield unit
    heap = [
        shrink_order(rj) for rj in victims.elastic if usable(rj) and rj.workers > rj.job.workers_min
    ]
    heapq.heapify(heap)
    while heap:
        rj = heapq.heappop(heap)[3]
        if rj.gone or rj.workers <= rj.job.workers_min or not eligible(st, rj, job, reclaim, key):
            continue
        yield worker_unit(st, rj)
        if rj.workers > rj.job.workers_min:
            heapq.heappush(heap, shrink_order(rj))
    gpu = job.worker.gpu > 0

    def cpu_ok(rj: RunningJob) -> bool:
        # Only work beyond its team's nominal quota is evicted for a GPU job.
        return (
            usable(rj)
            and rj.job.id not in moved
            and st.book.is_borrowing(rj.job.team)
            and eligible(st, rj, job, reclaim, key)
            and (reclaim or not young(rj))
        )

    def borrower_ok(rj: RunningJob) -> bool:
        return (
            reclaim
            and usable(rj)
            and rj.job.id not in moved
            and eligible(st, rj, job, reclaim, key)
        )

    def sole() -> Unit | None:
        # Among the first victims in order, one whose preemption alone completes the room.
        if sole_search is None or sole_search.tries <= 0:
            return None
        ahead = list(islice(filter(cpu_ok, victims.cpu_on_gpu if gpu else ()), SOLE_LOOKAHEAD))
        ahead += islice(filter(borrower_ok, victims.borrowers), 2 * SOLE_LOOKAHEAD - len(ahead))
        units = map(partial(preempt_unit, st), ahead)
        return next((u for u in units if sole_search.test(u)), None)

    phases = [(victims.cpu_on_gpu if gpu else [], cpu_ok)]
    if reclaim:  # only the owner of the quota preempts borrowers
        phases.append((victims.borrowers, borrower_ok))
    for phase, ok in phases:
        for rj in phase:
            if not ok(rj):
                continue
            unit = sole()
            if unit is not None:
                yield unit
                if not ok(rj):
                    continue
            yield preempt_unit(st, rj)


def make_room(st: CycleState, job: Job, admission: Admission) -> bool:
    """Free room for `job` by taking victims; True if it now has a reservation."""
    cfg = st.snapshot.config
    if st.make_room_attempts >= cfg.max_make_room_attempts:
        return False
    reclaim = admission.ok and not admission.borrows
    # Victims only get fewer during a cycle: a gang that found no room will not find it later.
    memo = (job.team, reclaim, tuple(sorted((r, res.as_tuple()) for r, _, res in job.gang())))
    if st.make_room_attempts >= cfg.max_make_room_attempts or memo in st.no_room:
        return False
    gang = job.gang()
    demand = job.demand()
    if not could_ever_fit(st, gang, demand):
        return False  # preempting anyone for it would be pointless
    st.make_room_attempts += 1
    may_borrow = may_borrow_for(st, job)
    free = st.cap.free_total()
    taken: list[Unit] = []
    freed = Resources()
    placed: list[Placed] | None = None
    # `tried`: a placement failed with the nodes as they are, but for those freed since
    # (the caller tried one when the job was admitted without reclaiming).
    tried = admission.ok and not admission.reclaim
    hostable = False  # a node freed since then could take one of the gang's tasks
    shapes = list({res.as_tuple(): res for _, _, res in gang}.values())
    if tried and not _could_ever_host(st, job, reclaim, shapes):
        st.no_room.add(memo)  # no node could take a task even with every victim gone
        return False

    def completes(unit: Unit) -> bool:
        add = Resources()
        for _, res in unit.tasks:
            add = add + res
        if search.tries <= 0 or not demand.fits_in(free + freed + add):
            return False
        search.tries -= 1
        # Without freeing anything: the quota (only the quota book changes, and back),
        # then room on the freed nodes (a cheap form of the test below).
        victim_team = unit.job.job.team
        st.book.remove(victim_team, add)
        quota = st.book.admit(job.team, demand, may_borrow)
        st.book.add(victim_team, add)
        if not quota.ok or quota.reclaim:
            return False
        if tried and not hostable and not st.cap.room_after(unit.tasks, shapes):
            return False
        mark = st.cap.mark()
        take_unit(st, unit)
        try:
            # Placing failed as things are: it succeeds only on a node the unit frees.
            if tried and not hostable:
                if not any(st.cap.could_take(pos, job.team, shapes) for pos, _ in unit.tasks):
                    return False
            placed = st.cap.place_gang(job.team, gang)
            if placed is not None:
                st.cap.unplace(placed, job.team)
            return placed is not None
        finally:
            give_back_unit(st, unit)
            st.cap.restored(mark)

    search = _Sole(completes)
    searching = reclaim and st.make_room_attempts <= SOLE_ATTEMPTS
    for unit in _candidates(st, job, reclaim, search if searching else None):
        if len(taken) >= MAX_VICTIM_UNITS:
            break
        take_unit(st, unit)
        taken.append(unit)
        freed = freed + unit.frees
        for pos, _ in unit.tasks:
            # Nodes only gain room here, so a node checked once needs checking again only
            # when it gains more.
            hostable = hostable or st.cap.could_take(pos, job.team, shapes)
        if not demand.fits_in(free + freed):
            continue
        again = st.book.admit(job.team, demand, may_borrow)
        if not again.ok or again.reclaim:
            continue
        if tried and not hostable:
            continue  # best fit would make the same choices and fail again
        placed = st.cap.place_gang(job.team, gang)
        if placed is not None:
            break
        tried, hostable = True, False
    if placed is None:
        for unit in reversed(taken):
            give_back_unit(st, unit)
        st.no_room.add(memo)
        return False
    # Keep only victims whose capacity the placement uses, or that the quota needs gone.
    used_nodes = {pos for _, _, pos, _ in placed}
    needed = [u for u in taken if any(pos in used_nodes for pos, _ in u.tasks)]
    spare = [u for u in taken if u not in needed]
    st.cap.unplace(placed, job.team)
    for unit in reversed(spare):
        give_back_unit(st, unit)
        again = st.book.admit(job.team, demand, may_borrow)
        if not again.ok or again.reclaim:
            take_unit(st, unit)
            needed.append(unit)
    placed = st.cap.place_gang(job.team, gang)
    if placed is None:  # cannot happen: the same capacity as before; stay safe
        for unit in reversed(needed):
            give_back_unit(st, unit)
        return False
    # The victims still hold their capacity until they stop: hold it again, and the job's
    # placement is reserved, so the node is accounted twice until then (never over-given).
    # A job shrunk and then preempted for the same job is only preempted: that stops the
    # workers its shrink took as well.
    preempted = {id(u.job) for u in needed if u.preempt}
    for unit in needed:
        for pos, res in unit.tasks:
            st.cap.take(pos, res, unit.job.job.team)
        if unit.preempt or id(unit.job) not in preempted:
            record_unit(st, unit, job)
    st.reserve(job, placed)
    n = sum(len(u.tasks) for u in needed)
    how = "stop or move" if any(u.server is not None for u in needed) else "stop"
    st.reason(job, f"capacity reclaimed for it: waiting for {n} task(s) of other jobs to {how}")
    return True


def _could_ever_host(st: CycleState, job: Job, reclaim: bool, shapes: list[Resources]) -> bool:
    """`reach.could_ever_host` with the units `_candidates` may take for `job`."""
    kinds = ["elastic"]
    if job.worker.gpu > 0:
        kinds.append("cpu_on_gpu")
    if reclaim:
        kinds.append("borrowers")
    reach = victims_of(st).bound(st)
    return could_ever_host(st, reach, job.team, teams_giving_way(st, job, reclaim), kinds, shapes)


def could_ever_fit(st: CycleState, gang: tuple[TaskSpec, ...], demand: Resources) -> bool:
    """Whether the gang fits the cluster at all: each task on some empty ready node, and
    all of it within the cluster's capacity."""
    largest = st.cap.max_capacity
    if not all(res.fits_in(largest) for _, _, res in gang):
        return False
    return demand.fits_in(Resources(*st.book.capacity))
