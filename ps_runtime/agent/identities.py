"""Task identities leased per node: one uid (its gid is the same number) per job.

A root agent runs each job's tasks as a uid from `TRAINHUB_TASK_UID_RANGE`. A job first
asks for `range[owner % len(range)]`, owner being the job whose checkpoint directory it
uses (itself, or the earlier run of a trial it continues), so the same directory gets the
same uid on every node in the ordinary case, which a shared checkpoint root needs; it
gets the next free one when that is taken, and a job continuing an ended job's checkpoint
directory on this node takes over that job's lease. A uid is leased to one job until
nothing of that job remains on the node: no live task and no checkpoint directory of it.
It is never handed to another job while a process runs as it. The table lives in the
agent's state directory (`identities.json`, 0600), so a restarted agent keeps its leases.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

LEASES_FILE = "identities.json"
VERSION = 1


class NoFreeIdentity(RuntimeError):
    """Every uid of the range is leased; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Lease:
    uid: int
    checkpoint_dir: str | None = None


def uids_in_use() -> set[int]:
    """Real uids of every process on the node (from /proc/<pid>/status)."""
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                text = f.read(4096)
        except OSError:
            continue
        if b"\nState:\tZ" in text:  # a zombie holds nothing but its exit status
            continue
        for line in text.splitlines():
            if line.startswith(b"Uid:"):
                found.update(int(x) for x in line.split()[1:3])
                break
    return found


class Identities:
    """The node's uid leases, persisted in `path`."""

    def __init__(
        self,
        path: Path,
        uids: range,
        *,
        processes: Callable[[], set[int]] = uids_in_use,
    ) -> None:
        self._path = path
        self._uids = uids
        self._processes = processes
        self._lock = threading.Lock()
        self._leases: dict[int, Lease] = self._load()  # guarded by _lock

    @property
    def uids(self) -> range:
        return self._uids

    def leases(self) -> dict[int, Lease]:
        with self._lock:
            return dict(self._leases)

    def lease(
        self, job_id: int, checkpoint_dir: str | None, live_jobs: Collection[int]
    ) -> tuple[int, int]:
        """The job's (uid, gid), leasing one when it has none.

        `live_jobs`: jobs with a live task on this node (their leases are kept).

        Raises:
            NoFreeIdentity: every uid of the range is held.
        """
        with self._lock:
            held = self._leases.get(job_id)
            if held is not None:
                if checkpoint_dir and held.checkpoint_dir != checkpoint_dir:
                    self._leases[job_id] = Lease(held.uid, checkpoint_dir)
                    self._save()
                return held.uid, held.uid
            self._release_unused(live_jobs)
            inherited = self._inherit(job_id, checkpoint_dir, live_jobs)
            if inherited is not None:
                return inherited, inherited
            taken = {lease.uid for lease in self._leases.values()}
            running = self._processes()
            start = _owner(job_id, checkpoint_dir) % len(self._uids)
            for offset in range(len(self._uids)):
                uid = self._uids[(start + offset) % len(self._uids)]
                if uid not in taken and uid not in running:
                    self._leases[job_id] = Lease(uid, checkpoint_dir)
                    self._save()
                    if offset:
                        logger.info("job %s: uid %d (its first choice is taken)", job_id, uid)
                    return uid, uid
        raise NoFreeIdentity(
            f"all {len(self._uids)} task uids of TRAINHUB_TASK_UID_RANGE are leased to jobs "
            "whose tasks or checkpoint directories remain on this node: remove old "
            "checkpoint directories or widen the range"
        )

    def _inherit(
        self, job_id: int, checkpoint_dir: str | None, live_jobs: Collection[int]
    ) -> int | None:
        """The uid of a job whose checkpoint directory this job continues (a promoted
        trial's run): the directory's files are that uid's. Taken over from an ended job;
        shared with one whose last tasks still stop here (the same trial's earlier run:
        only the control plane names a directory, and only a trial's runs share one)."""
        if not checkpoint_dir:
            return None
        for other, lease in list(self._leases.items()):
            if lease.checkpoint_dir == checkpoint_dir:
                if other not in live_jobs:
                    del self._leases[other]
                self._leases[job_id] = Lease(lease.uid, checkpoint_dir)
                self._save()
                logger.info("job %s: uid %d, with job %s's checkpoints", job_id, lease.uid, other)
                return lease.uid
        return None

    def _release_unused(self, live_jobs: Collection[int]) -> None:
        for job_id, lease in list(self._leases.items()):
            if job_id in live_jobs:
                continue
            if lease.checkpoint_dir and os.path.lexists(lease.checkpoint_dir):
                continue
            del self._leases[job_id]
            logger.info("uid %d is free again (job %s left nothing here)", lease.uid, job_id)

    def _load(self) -> dict[int, Lease]:
        try:
            with open(self._path, "rb") as f:
                raw = f.read(16 * 1024 * 1024)
        except FileNotFoundError:
            return {}
        try:
            obj = json.loads(raw)
            return {
                int(job): Lease(int(entry["uid"]), entry.get("checkpoint_dir"))
                for job, entry in obj["leases"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Refusing to start would strand the node; leasing afresh only risks handing
            # out a uid whose files remain, which the process check below still guards.
            logger.error("ignoring the unreadable lease table %s: %s", self._path, exc)
            return {}

    def _save(self) -> None:
        data = {
            "version": VERSION,
            "leases": {
                str(job): {"uid": lease.uid, "checkpoint_dir": lease.checkpoint_dir}
                for job, lease in self._leases.items()
            },
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_name(self._path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(data, out)
        os.replace(tmp, self._path)


def _owner(job_id: int, checkpoint_dir: str | None) -> int:
    """The job whose uid this job asks for first: the owner of its checkpoint directory
    (`job-<id>`, a trial run continuing an earlier one's) or itself, so every node of a
    shared checkpoint root gives the directory's files the same uid."""
    name = os.path.basename(os.path.normpath(checkpoint_dir)) if checkpoint_dir else ""
    if name.startswith("job-") and name[4:].isdigit():
        return int(name[4:])
    return job_id
