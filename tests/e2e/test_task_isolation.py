"""The task sandbox under attack (issue 26): a job's own code, run by the agent's real
task-starting code (`Supervisor` with the node's `Isolation`, root agent as production
runs it), tries what the security review did, and each attempt fails.

The probe (`isolation_probe.py`) stands for the job's code: it is bound read-only into
the sandbox like a job's code archive. None of these tests skips under CI=true.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.agent import identities, sandbox
from ps_runtime.agent.codecache import CodeCache
from ps_runtime.agent.isolation import MODE_SANDBOX, Isolation
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import DesiredTask, TaskKey
from ps_runtime.agent.state import AgentState, save_state
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.taskenv import Role

from ..archive_builders import tar_gz
from ..ps_runtime.agent.helpers import require_root, statuses, wait_for

PROBE = Path(__file__).with_name("isolation_probe.py")
AGENT_SECRETS = {
    "TRAINHUB_ADMIN_PASSWORD": "admin-password",
    "TRAINHUB_SECRET_KEY": "django-secret-key",
    "REDIS_URL": "redis://:redis-password@127.0.0.1:6379/0",
    "DATABASE_URL": "postgres://trainhub:db-password@127.0.0.1/trainhub",
    "DJANGO_SUPERUSER_PASSWORD": "superuser-password",
}
# What a sandbox's /dev holds (bubblewrap's --dev), and nothing else without GPUs.
MINIMAL_DEV = {
    "core",
    "fd",
    "full",
    "mqueue",
    "null",
    "ptmx",
    "pts",
    "random",
    "shm",
    "stderr",
    "stdin",
    "stdout",
    "tty",
    "urandom",
    "zero",
}
CREDENTIAL = "node-credential-that-no-task-may-read"


def root_sandbox_dir(prefix: str) -> Iterator[Path]:
    """A directory for a root agent's work directory and the tasks' files, removed after.
    Not pytest's tmp_path: /tmp/pytest-of-root is 0700, and bubblewrap binds a task's
    directories as the task's uid."""
    require_root()
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        subprocess.run(["chmod", "-R", "u+rwX", str(path)], check=False)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def base() -> Iterator[Path]:
    yield from root_sandbox_dir("trainhub-sandbox-")


def sandboxed(base: Path, **env: str) -> Isolation:
    """The node's isolation as a root agent decides it, with the probe bound like a job's
    code (read-only)."""
    code = base / "job-code"
    code.mkdir(mode=0o755, exist_ok=True)
    shutil.copy(PROBE, code / "probe.py")
    (code / "probe.py").chmod(0o644)
    isolation = Isolation.from_settings(base / "agent", {"TRAINHUB_TASK_ISOLATION": "auto", **env})
    assert isolation.mode == MODE_SANDBOX, isolation.describe()
    assert isolation.box is not None
    box = dataclasses.replace(isolation.box, runtime=(*isolation.box.runtime, str(code)))
    return dataclasses.replace(isolation, box=box)


def probe_command(isolation: Isolation, base: Path) -> list[str]:
    return [isolation.python, str(base / "job-code" / "probe.py")]


def real_credential(base: Path) -> Path:
    """The node credential as the agent stores it (`save_state`, what enroll writes)."""
    path = base / "agent-state" / "agent.json"
    path.parent.mkdir(mode=0o755)
    now = datetime.now(UTC)
    save_state(path, AgentState("http://127.0.0.1:1", 1, CREDENTIAL, now, now + timedelta(1)))
    return path


class Tasks:
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.messages: list[dict[str, Any]] = []

    def lines(self, key: TaskKey) -> list[str]:
        self.messages.extend(m.to_wire() for m in self.outbox.drain())
        return [
            line
            for m in self.messages
            if m["type"] == "logs" and (m["id"], m["attempt"]) == (key.id, key.attempt)
            for line in m["lines"]
        ]

    def states(self) -> list[tuple[int, int, str]]:
        self.messages.extend(m.to_wire() for m in self.outbox.drain())
        return statuses(self.messages)

    def report(self, key: TaskKey, timeout: float = 30) -> dict[str, Any]:
        line = wait_for(
            lambda: next((x for x in self.lines(key) if x.startswith("{")), None),
            timeout,
            f"task {key}'s report; output so far: {self.lines(key)} states {self.states()}",
        )
        return dict(json.loads(line))

    def ended(self, key: TaskKey) -> str | None:
        return next(
            (s for i, a, s in self.states() if (i, a) == (key.id, key.attempt) and s != "running"),
            None,
        )


def task(task_id: int, job_id: int, attempt: int = 0, **env: str) -> DesiredTask:
    return DesiredTask(
        id=task_id,
        attempt=attempt,
        job_id=job_id,
        role=Role.PS,
        index=0,
        cpu=0.5,
        memory_mb=512,
        env={"TRAINHUB_JOB_TOKEN": f"token-of-job-{job_id}", **env},
    )


def uids_running(uid: int) -> list[int]:
    return sorted(p for p, u in _process_uids().items() if u == uid)


def _process_uids() -> dict[int, int]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            uid_line = next(x for x in status.splitlines() if x.startswith("Uid:"))
            found[int(entry.name)] = int(uid_line.split()[1])
    return found


def test_a_job_cannot_reach_another_job_the_node_or_root(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in AGENT_SECRETS.items():
        monkeypatch.setenv(name, value)
    isolation = sandboxed(base)
    credential = real_credential(base)
    checkpoints = base / "checkpoints"
    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox, base / "agent", command=probe_command(isolation, base), isolation=isolation
    )
    victim = task(
        1, 101, TRAINHUB_PROBE_MODE="victim", TRAINHUB_CHECKPOINT_DIR=str(checkpoints / "job-101")
    )
    try:
        victim_process = supervisor.start(victim)
        assert victim_process is not None, tasks.states()
        wait_for(lambda: "ready" in tasks.lines(victim.key), 20, "the victim task")
        attacker = task(
            2,
            202,
            TRAINHUB_CHECKPOINT_DIR=str(checkpoints / "job-202"),
            TRAINHUB_PROBE_OTHER_DIR=str(base / "agent" / "tasks" / "1-0"),
            TRAINHUB_PROBE_OTHER_CHECKPOINTS=str(checkpoints / "job-101"),
            TRAINHUB_PROBE_OTHER_PID=str(victim_process.pid),
            TRAINHUB_PROBE_CREDENTIAL=str(credential),
            TRAINHUB_PROBE_AGENT_DIR=str(base / "agent"),
        )
        assert supervisor.start(attacker) is not None, tasks.states()
        report = tasks.report(attacker.key)

        # Another job, the node and root: out of reach.
        for attack in (
            "read_other_dir",
            "read_other_checkpoints",
            "read_credential",
            "list_credential_dir",
            "read_agent_table",
            "signal_other",
            "signal_other_group",
            "write_runtime",
            "write_cluster_file",
            "become_root",
            "new_user_namespace",
        ):
            assert report[attack] is False, (attack, report)
        assert victim_process.proc is not None and victim_process.proc.poll() is None
        # Its own places are its own.
        assert report["write_own_scratch"] is True
        assert report["write_own_checkpoints"] is True
        assert report["import_ps_runtime"] is True
        # Its own uid, leased to its job alone; no supplementary group, root nowhere.
        assert isolation.leases is not None
        leases = isolation.leases.leases()
        assert (report["uid"], report["gid"], report["groups"]) == (
            leases[202].uid,
            leases[202].uid,
            [],
        )
        assert leases[101].uid != leases[202].uid and report["uid"] != 0
        # It sees its own processes only (its PID namespace), no device but the basic
        # ones, and of the host's file system only what the sandbox binds.
        assert len(report["pids"]) <= 4, report["pids"]
        assert set(report["dev"]) <= MINIMAL_DEV, report["dev"]
        assert "root" not in report["root"] and "home" not in report["root"]
        # No secret of the agent's reached the task, nor another job's token.
        assert not set(AGENT_SECRETS) & set(report["env"])
        assert "/trainhub/task-2-0" in report["cgroup"]
        for path in (checkpoints / "job-101",):
            st = path.stat()
            assert (st.st_uid, st.st_mode & 0o777) == (leases[101].uid, 0o700)
        assert credential.read_text().count(CREDENTIAL) == 1
    finally:
        assert supervisor.stop_all(grace=2.0)
    assert isolation.hierarchy is not None
    assert not list(isolation.hierarchy.root.glob("**/trainhub/task-[12]-0"))


def test_a_job_steered_onto_an_earlier_jobs_uid_gets_another(base: Path) -> None:
    """Job ids two apart share a first-choice uid in a range of two: the second job gets
    the other uid while the first job's checkpoints remain, and a third finds none free
    until they are gone."""
    isolation = sandboxed(base, TRAINHUB_TASK_UID_RANGE="400000-400001")
    checkpoints = base / "checkpoints"
    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox, base / "agent", command=probe_command(isolation, base), isolation=isolation
    )
    first = task(
        1, 10, TRAINHUB_PROBE_MODE="victim", TRAINHUB_CHECKPOINT_DIR=str(checkpoints / "job-10")
    )
    try:
        assert supervisor.start(first) is not None
        wait_for(lambda: "ready" in tasks.lines(first.key), 20, "the first job")
        supervisor.stop(first.key, grace=1.0)
        assert supervisor.wait_gone(first.key, 10)
        assert (checkpoints / "job-10" / "ckpt").exists()  # its files remain

        steered = task(
            2,
            12,
            TRAINHUB_PROBE_MODE="report-and-wait",
            TRAINHUB_CHECKPOINT_DIR=str(checkpoints / "job-12"),
            TRAINHUB_PROBE_OTHER_CHECKPOINTS=str(checkpoints / "job-10"),
        )
        assert supervisor.start(steered) is not None
        report = tasks.report(steered.key)
        assert report["uid"] == 400001  # 12 % 2 == 10 % 2, but 400000 is job 10's
        assert report["read_other_checkpoints"] is False
        assert (checkpoints / "job-10").stat().st_uid == 400000

        # Both uids held (job 10's checkpoints, job 12 running): a third job waits.
        third = task(3, 14, TRAINHUB_CHECKPOINT_DIR=str(checkpoints / "job-14"))
        assert supervisor.start(third) is None
        tasks.states()
        failed = [m for m in tasks.messages if m.get("id") == 3 and m["type"] == "task_status"]
        assert "all 2 task uids" in failed[-1]["message"], failed
        # Once job 10 left nothing on the node, its uid goes to the next job.
        shutil.rmtree(checkpoints / "job-10")
        fourth = task(
            4, 16, TRAINHUB_PROBE_MODE="report", TRAINHUB_CHECKPOINT_DIR=str(checkpoints / "job-16")
        )
        assert supervisor.start(fourth) is not None
        assert tasks.report(fourth.key)["uid"] == 400000
    finally:
        assert supervisor.stop_all(grace=2.0)
    leases = json.loads((base / "agent" / identities.LEASES_FILE).read_text())["leases"]
    assert {int(j): e["uid"] for j, e in leases.items()} == {12: 400001, 16: 400000}


def test_swapping_another_attempts_code_for_a_link_never_wins(base: Path) -> None:
    """The review won 4 of 10 tries swapping a relaunched task's code directory for a link
    while the agent unpacked it. A racer of the same job tries on 50 attempts."""
    isolation = sandboxed(base)
    archive = tar_gz({"model.py": b"VALUE = 1\n", "pkg/__init__.py": b""})
    digest = "sha256:" + hashlib.sha256(archive).hexdigest()
    cache = base / "agent" / "code"
    cache.mkdir(parents=True, mode=0o700)
    (cache / digest.removeprefix("sha256:")).write_bytes(archive)
    code = CodeCache("http://127.0.0.1:9", cache)
    victim = base / "victim"
    victim.mkdir(mode=0o700)
    (victim / "keep").write_text("root's")
    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox,
        base / "agent",
        command=probe_command(isolation, base),
        isolation=isolation,
        code=code,
    )
    checkpoint = base / "checkpoints" / "job-7"
    racer = task(
        1,
        7,
        TRAINHUB_PROBE_MODE="race",
        TRAINHUB_CHECKPOINT_DIR=str(checkpoint),
        TRAINHUB_PROBE_RACE_DIRS=str(base / "agent" / "tasks" / "2-{n}" / "code"),
        TRAINHUB_PROBE_VICTIM=str(victim),
    )
    try:
        assert supervisor.start(racer) is not None
        wait_for(lambda: "racing" in tasks.lines(racer.key), 20, "the racer")
        for attempt in range(1, 51):
            relaunched = task(2, 7, attempt, TRAINHUB_PROBE_MODE="quick", TRAINHUB_CODE=digest)
            started = supervisor.start(relaunched)
            assert started is not None, tasks.states()
            assert tasks.report(relaunched.key)["code"] == ["model.py", "pkg"]
            assert supervisor.wait_gone(relaunched.key, 10)
        (checkpoint / "stop-racing").touch()
        raced = tasks.report(racer.key)
        assert raced["swapped"] == 0 and raced["tries"] >= 50, raced
    finally:
        assert supervisor.stop_all(grace=2.0)
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]
    assert (victim / "keep").read_text() == "root's"


def test_links_planted_before_a_scale_a_stop_a_restart_and_an_agent_restart(
    base: Path,
) -> None:
    """The task plants links to a root-only file wherever it can write, then the agent
    does what it does to a task's files: rewrite the cluster file (a scale), record a
    stop, start the next attempt (a restart), and adopt the task after a restart of its
    own. The root-only file is never written, nor shipped as the job's logs."""
    isolation = sandboxed(base)
    target = base / "root-only"
    target.write_text("root's crontab\n")
    target.chmod(0o600)
    planter_code = base / "job-code" / "planter.py"
    planter_code.write_text(PLANTER)
    planter_code.chmod(0o644)
    outbox = Outbox()
    tasks = Tasks(outbox)
    command = [isolation.python, str(planter_code)]
    supervisor = Supervisor(outbox, base / "agent", command=command, isolation=isolation)
    checkpoint = base / "checkpoints" / "job-9"
    cluster = '{"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}'
    planter = task(
        1,
        9,
        TRAINHUB_CHECKPOINT_DIR=str(checkpoint),
        TRAINHUB_CLUSTER=cluster,
        TRAINHUB_PROBE_TARGET=str(target),
    )
    try:
        assert supervisor.start(planter) is not None
        planted = tasks.report(planter.key)
        # Its own scratch and checkpoint directory take links, which the agent ignores;
        # the agent's paths it may only shadow inside its own sandbox (below /tmp here).
        assert planted["own_paths_planted"], planted
        # A scale: the agent rewrites the cluster file.
        grown = '{"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}'
        assert supervisor.update_cluster(
            dataclasses.replace(planter, env={**planter.env, "TRAINHUB_CLUSTER": grown})
        )
        # An agent restart: a new agent adopts the task and reopens its files by path.
        adopter = Supervisor(outbox, base / "agent", command=command, isolation=isolation)
        assert adopter.adopt() == [planter.key]
        # A stop, recorded in a file, then the next attempt of the same task.
        adopter.stop(planter.key, grace=2.0)
        assert adopter.wait_gone(planter.key, 15)
        assert supervisor.start(dataclasses.replace(planter, attempt=1)) is not None
        tasks.report(TaskKey(1, 1))
        for path in planted["agent_paths_planted"]:  # none of them is a link on the node
            assert not Path(path).is_symlink(), path
    finally:
        supervisor.stop_all(grace=2.0)
    assert target.read_text() == "root's crontab\n"
    st = target.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600)
    shipped = json.dumps(tasks.messages)
    assert "root's crontab" not in shipped


PLANTER = """
import json, os, sys, time
env = os.environ
target = env["TRAINHUB_PROBE_TARGET"]
cluster = env["TRAINHUB_CLUSTER_FILE"]
run = os.path.dirname(cluster)
task_dir = os.path.dirname(run)
agent_paths = [os.path.join(task_dir, n) for n in (
    "stdout.log", "stderr.log", "metrics.jsonl", "exit-status", "exit-status.tmp",
    "stop-requested", "code", "run")] + [os.path.join(run, n) for n in (
    "cluster.json", ".cluster.json.tmp", "tls-key.pem", ".tls-key.pem.tmp")]
own_paths = [os.path.join(os.getcwd(), "link"), os.path.join(env["HOME"], "link2"),
             os.path.join(env["TRAINHUB_CHECKPOINT_DIR"], "link")]
def plant(path):
    try:
        if os.path.lexists(path):
            os.rename(path, path + ".moved")
        os.symlink(target, path)
        return True
    except OSError:
        return False
report = {"agent_paths_planted": [p for p in agent_paths if plant(p)],
          "own_paths_planted": [p for p in own_paths if plant(p)]}
print(json.dumps(report), flush=True)
time.sleep(120)
"""


def test_the_scratch_is_bounded_and_says_so(base: Path) -> None:
    isolation = sandboxed(base, TRAINHUB_TASK_SCRATCH_MB="8")
    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox, base / "agent", command=probe_command(isolation, base), isolation=isolation
    )
    filler = task(1, 21, TRAINHUB_PROBE_MODE="fill", TRAINHUB_PROBE_FILL_MB="64")
    assert supervisor.start(filler) is not None
    wait_for(lambda: tasks.ended(filler.key), 30, "the filler to end")
    assert tasks.ended(filler.key) == "failed"
    assert "filled" not in tasks.lines(filler.key)
    ended = [m for m in tasks.messages if m["type"] == "task_status" and m["id"] == 1]
    assert "scratch" in ended[-1]["message"] and "8 MiB" in ended[-1]["message"], ended
    # The task's directory is gone once its output was delivered.
    supervisor.commit(supervisor.offsets_snapshot())
    assert not (base / "agent" / "tasks" / "1-0").exists()


def test_the_cgroup_bounds_resident_memory(base: Path) -> None:
    isolation = sandboxed(base)
    assert isolation.hierarchy is not None, "no cgroup hierarchy mounted"
    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox, base / "agent", command=probe_command(isolation, base), isolation=isolation
    )
    hog = task(3, 303, TRAINHUB_PROBE_MODE="hog", TRAINHUB_PROBE_HOG_MB="400")
    hog = dataclasses.replace(hog, memory_mb=100)
    assert supervisor.start(hog) is not None
    wait_for(lambda: tasks.ended(hog.key), 30, "the hog to end")
    assert tasks.ended(hog.key) == "failed"
    assert "survived" not in tasks.lines(hog.key)
    ended = [m for m in tasks.messages if m["type"] == "task_status" and m["state"] == "failed"]
    assert ended[-1]["exit_code"] == 137, ended  # SIGKILL from the OOM killer


def test_a_process_that_leaves_the_task_group_ends_with_the_task(base: Path) -> None:
    isolation = sandboxed(base)
    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox, base / "agent", command=probe_command(isolation, base), isolation=isolation
    )
    escaper = task(5, 505, TRAINHUB_PROBE_MODE="escape")
    started = supervisor.start(escaper)
    assert started is not None
    wait_for(lambda: "ESCAPED" in tasks.lines(escaper.key), 20, "the escape")
    assert supervisor.wait_gone(escaper.key, 20)
    assert isolation.leases is not None
    uid = isolation.leases.leases()[505].uid
    wait_for(lambda: not uids_running(uid), 5, "every process of the job's uid to end")
    assert started.cgroup is not None
    assert not any(d.exists() for d in started.cgroup.dirs)


def test_only_the_tasks_own_gpus_are_in_its_dev(base: Path) -> None:
    """Without a device controller (cgroup v2) a GPU that is not in /dev cannot be
    opened: the sandbox binds only the task's own /dev/nvidia<N> and CUDA's control
    devices. Char devices made here stand in for a GPU node's."""
    dev = base / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"):
        os.mknod(dev / name, 0o666 | 0o020000, os.makedev(1, 3))
    isolation = sandboxed(base)
    assert isolation.box is not None
    isolation = dataclasses.replace(isolation, box=dataclasses.replace(isolation.box, dev=dev))
    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox, base / "agent", command=probe_command(isolation, base), isolation=isolation
    )
    gpu_task = dataclasses.replace(task(6, 606), gpu_indices=(1, 3))
    try:
        assert supervisor.start(gpu_task) is not None
        report = tasks.report(gpu_task.key)
    finally:
        supervisor.stop_all(grace=2.0)
    assert set(report["dev"]) - MINIMAL_DEV == {"nvidia1", "nvidia3", "nvidiactl", "nvidia-uvm"}
    assert "CUDA_VISIBLE_DEVICES" in report["env"]


UNPRIVILEGED = 60123


def test_an_unprivileged_agents_task_cannot_read_its_credential(base: Path) -> None:
    """An agent that is not root sandboxes its tasks too: they run as its uid, yet its
    state file (credential) and work directory are not in their sandbox."""
    home = base / "agent-user"
    home.mkdir(mode=0o700)
    os.chown(home, UNPRIVILEGED, UNPRIVILEGED)
    code = home / "code"
    code.mkdir(mode=0o755)
    shutil.copy(PROBE, code / "probe.py")
    for path in (code, code / "probe.py"):
        os.chown(path, UNPRIVILEGED, UNPRIVILEGED)
    script = UNPRIVILEGED_AGENT.format(home=str(home), code=str(code))
    pythonpath = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), sysconfig.get_paths()["purelib"]]
    )
    python = "/usr/bin/python3.11" if Path("/usr/bin/python3.11").exists() else sys.executable
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={UNPRIVILEGED}",
            f"--regid={UNPRIVILEGED}",
            "--clear-groups",
            python,
            "-c",
            script,
        ],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["mode"] == "sandbox-user"
    assert report["uid"] == UNPRIVILEGED  # the agent's own uid...
    assert report["read_credential"] is False  # ...yet not its credential
    assert report["list_credential_dir"] is False
    assert report["read_agent_table"] is False
    assert report["import_ps_runtime"] is True


UNPRIVILEGED_AGENT = """
import json, time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from ps_runtime.agent.isolation import Isolation
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import DesiredTask
from ps_runtime.agent.state import AgentState, save_state
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.taskenv import Role
import dataclasses
home = Path("{home}")
state = home / ".config" / "trainhub" / "agent.json"
now = datetime.now(UTC)
save_state(state, AgentState("http://127.0.0.1:1", 1, "unprivileged-node-credential", now,
                             now + timedelta(1)))
isolation = Isolation.from_settings(home / "work")
box = dataclasses.replace(isolation.box, runtime=isolation.box.runtime + ("{code}",))
isolation = dataclasses.replace(isolation, box=box)
outbox = Outbox()
sup = Supervisor(outbox, home / "work", command=[isolation.python, "{code}/probe.py"],
                 isolation=isolation)
t = DesiredTask(id=1, attempt=0, job_id=1, role=Role.PS, index=0, env={{
    "TRAINHUB_PROBE_CREDENTIAL": str(state), "TRAINHUB_PROBE_AGENT_DIR": str(home / "work")}})
sup.start(t)
messages = []
for _ in range(200):
    messages += [m.to_wire() for m in outbox.drain()]
    lines = [x for m in messages if m["type"] == "logs" for x in m["lines"] if x.startswith("{{")]
    if lines:
        report = json.loads(lines[0])
        report["mode"] = str(isolation.mode)
        print(json.dumps(report))
        break
    time.sleep(0.1)
else:
    raise SystemExit(f"no report: {{messages}}")
sup.stop_all(grace=2.0)
"""


def test_sandbox_helpers_name_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(sandbox.SandboxError, match="TRAINHUB_TASK_SCRATCH_MB"):
        sandbox.scratch_bytes({"TRAINHUB_TASK_SCRATCH_MB": "\uff11\uff10"})
    with pytest.raises(sandbox.SandboxError, match="TRAINHUB_TASK_DATA_PATHS"):
        sandbox.data_paths({"TRAINHUB_TASK_DATA_PATHS": "relative/dir"})
    assert sandbox.data_paths({"TRAINHUB_TASK_DATA_PATHS": str(tmp_path)}) == (str(tmp_path),)


def test_the_bubblewrap_version_decides_its_options(tmp_path: Path) -> None:
    old = tmp_path / "bwrap"
    old.write_text("#!/bin/sh\necho 'bubblewrap 0.6.1'\n")
    old.chmod(0o755)
    assert sandbox.bwrap_version(str(old)) == (0, 6, 1)
    assert sandbox.bwrap_version(str(tmp_path / "absent")) == ()
    box = sandbox.Sandbox(str(old), disable_userns=sandbox.bwrap_version(str(old)) >= (0, 8))
    assert "--disable-userns" not in box.command(sandbox.TaskMounts(tmp_path), ["true"])
    installed = sandbox.bwrap_path({})
    assert sandbox.bwrap_version(installed) >= (0, 8)
    assert "--disable-userns" in sandbox.Sandbox(installed).command(
        sandbox.TaskMounts(tmp_path), ["true"]
    )


def test_a_stopped_task_ends_in_its_own_time_and_its_exit_code_is_kept(base: Path) -> None:
    """SIGTERM reaches the task through its group; bubblewrap's own process outlives it (it
    starts with SIGTERM ignored) and reports the task's own exit, not its own death."""
    isolation = sandboxed(base)
    outbox = Outbox()
    tasks = Tasks(outbox)
    supervisor = Supervisor(
        outbox, base / "agent", command=probe_command(isolation, base), isolation=isolation
    )
    graceful = task(8, 808, TRAINHUB_PROBE_MODE="graceful")
    assert supervisor.start(graceful) is not None
    wait_for(lambda: "ready" in tasks.lines(graceful.key), 20, "the task")
    supervisor.stop(graceful.key, grace=10.0)
    assert supervisor.wait_gone(graceful.key, 15)
    assert "saved" in tasks.lines(graceful.key)
    ended = [m for m in tasks.messages if m["type"] == "task_status" and m["id"] == 8]
    assert (ended[-1]["state"], ended[-1]["exit_code"]) == ("stopped", 3), ended
