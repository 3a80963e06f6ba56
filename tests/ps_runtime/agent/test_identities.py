"""Task uid leases: one uid per job, kept while its checkpoints remain, inherited by the
run that continues them."""

from __future__ import annotations

from pathlib import Path

from ps_runtime.agent.identities import Identities


def identities(tmp_path: Path) -> Identities:
    return Identities(tmp_path / "identities.json", range(5000, 5010), processes=set)


def test_a_job_first_asks_for_its_own_uid_and_keeps_it(tmp_path: Path) -> None:
    ids = identities(tmp_path)
    ckpt = tmp_path / "job-13"
    assert ids.lease(13, str(ckpt), live_jobs=set()) == (5003, 5003)
    assert ids.lease(13, str(ckpt), live_jobs={13}) == (5003, 5003)
    assert identities(tmp_path).leases()[13].uid == 5003  # persisted


def test_a_run_continuing_an_ended_jobs_checkpoints_takes_over_its_uid(tmp_path: Path) -> None:
    ids = identities(tmp_path)
    ckpt = tmp_path / "job-13"
    ckpt.mkdir()  # the first run's checkpoints remain: its lease stays
    ids.lease(13, str(ckpt), live_jobs=set())
    assert ids.lease(21, str(ckpt), live_jobs=set()) == (5003, 5003)
    assert 13 not in ids.leases()


def test_on_another_node_the_continuing_run_asks_for_the_owners_uid(tmp_path: Path) -> None:
    ids = identities(tmp_path)  # this node never ran job 13
    assert ids.lease(21, str(tmp_path / "job-13"), live_jobs=set()) == (5003, 5003)


def test_a_run_whose_earlier_run_still_stops_here_shares_its_uid(tmp_path: Path) -> None:
    ids = identities(tmp_path)
    ckpt = tmp_path / "job-13"
    ids.lease(13, str(ckpt), live_jobs=set())
    assert ids.lease(21, str(ckpt), live_jobs={13}) == (5003, 5003)
    assert ids.leases()[13].uid == ids.leases()[21].uid == 5003
    # Another job, its own directory, never gets a uid a lease holds.
    assert ids.lease(3, str(tmp_path / "job-3"), live_jobs={13, 21})[0] not in (5003,)
