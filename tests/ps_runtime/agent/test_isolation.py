"""The task environment allow-list, uid ranges, cgroup files and the isolation settings."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from ps_runtime.agent import cgroups, limits, taskdirs
from ps_runtime.agent.isolation import (
    MODE_NONE,
    MODE_SANDBOX,
    MODE_SANDBOX_USER,
    MODE_UNAVAILABLE,
    Isolation,
    IsolationError,
    parse_uid_range,
    task_environment,
)

from .helpers import require_root

AGENT_SECRETS = {
    "TRAINHUB_ADMIN_PASSWORD": "hunter2",
    "TRAINHUB_SECRET_KEY": "django-secret",
    "TRAINHUB_AGENT_STATE": "/etc/trainhub/agent.json",
    "TRAINHUB_NODE_CREDENTIAL": "node-cred",
    "DJANGO_SUPERUSER_PASSWORD": "pw",
    "DJANGO_SETTINGS_MODULE": "trainhub.settings",
    "REDIS_URL": "redis://:pw@redis:6379/0",
    "DATABASE_URL": "postgres://u:pw@db/trainhub",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "LD_PRELOAD": "/tmp/evil.so",
    "PYTHONPATH": "/somewhere/else",
}
AGENT_ENV = {
    **AGENT_SECRETS,
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "TZ": "UTC",
    "HOME": "/root",
    "TRAINHUB_TLS_CA": "/etc/trainhub/ca.pem",
}
DESIRED = {
    "TRAINHUB_ROLE": "ps",
    "TRAINHUB_JOB_ID": "7",
    "TRAINHUB_JOB_TOKEN": "job-7-token",
    "TRAINHUB_BIND": "0.0.0.0:5000",
    "LD_PRELOAD": "/tmp/evil.so",  # only TRAINHUB_* names come from the desired task
}


def test_task_environment_has_none_of_the_agents_secrets() -> None:
    env = task_environment(
        AGENT_ENV, DESIRED, home="/work/tasks/1-0", pythonpath=["/opt/rt"], gpu_indices=(1, 3)
    )
    for name, value in AGENT_SECRETS.items():
        if name == "PYTHONPATH":
            continue
        assert name not in env
        assert value not in env.values()
    assert env == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "TRAINHUB_TLS_CA": "/etc/trainhub/ca.pem",
        "TRAINHUB_ROLE": "ps",
        "TRAINHUB_JOB_ID": "7",
        "TRAINHUB_JOB_TOKEN": "job-7-token",
        "TRAINHUB_BIND": "0.0.0.0:5000",
        "HOME": "/work/tasks/1-0",
        "PYTHONPATH": "/opt/rt",
        "CUDA_VISIBLE_DEVICES": "1,3",
    }


def test_a_sandboxed_task_gets_no_tls_file_of_the_agents() -> None:
    env = task_environment(AGENT_ENV, DESIRED, home="/tmp", pass_agent_tls=False)
    assert "TRAINHUB_TLS_CA" not in env


def test_task_environment_defaults() -> None:
    env = task_environment({}, {}, home="/h")
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # no GPU: none visible, not all of them
    assert "PYTHONPATH" not in env


def test_uid_range() -> None:
    uids = parse_uid_range("200000-200009")
    assert (uids.start, len(uids)) == (200000, 10)
    fullwidth = "\uff12\uff10\uff10\uff10\uff10-\uff12\uff10\uff11\uff10\uff10"
    for bad in ("200000", "x-y", "5-2", "0-100", "100-200", "", fullwidth):
        with pytest.raises(IsolationError, match="TRAINHUB_TASK_UID_RANGE"):
            parse_uid_range(bad)


def _fake_v1(root: Path) -> Path:
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (root / "cpu").mkdir()
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    return root


def test_detect(tmp_path: Path) -> None:
    assert cgroups.detect(tmp_path) is None
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    assert cgroups.detect(v2) == cgroups.Hierarchy(2, v2)
    v1 = _fake_v1(tmp_path / "v1")
    assert cgroups.detect(v1) == cgroups.Hierarchy(1, v1)


def test_cgroup_files_v1(tmp_path: Path) -> None:
    hierarchy = cgroups.Hierarchy(1, _fake_v1(tmp_path))
    cgroup = cgroups.create(hierarchy, "task-4-0", memory_mb=512, cpu=1.5)
    memory = tmp_path / "memory" / "trainhub" / "task-4-0"
    cpu = tmp_path / "cpu" / "trainhub" / "task-4-0"
    assert cgroup.dirs == (memory, cpu)
    assert (memory / "memory.limit_in_bytes").read_text() == str(512 * 1024 * 1024)
    assert (cpu / "cpu.cfs_period_us").read_text() == "100000"
    assert (cpu / "cpu.cfs_quota_us").read_text() == "150000"
    assert cgroup.procs_files == [memory / "cgroup.procs", cpu / "cgroup.procs"]
    unlimited = cgroups.create(hierarchy, "task-5-0", memory_mb=0, cpu=0)
    assert (unlimited.dirs[0] / "memory.limit_in_bytes").read_text() == "-1"
    assert (unlimited.dirs[1] / "cpu.cfs_quota_us").read_text() == "-1"


def test_gpus_not_assigned_are_denied_by_the_v1_devices_controller(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_text("")
    assert cgroups.nvidia_devices(dev) == [0, 1, 2]
    root = _fake_v1(tmp_path / "cg")
    (root / "devices").mkdir()
    (root / "devices" / "devices.deny").write_text("")
    cgroup = cgroups.create(cgroups.Hierarchy(1, root), "task-6-0", 0, 0, deny_gpus=[0, 2])
    devices = root / "devices" / "trainhub" / "task-6-0"
    assert cgroup.dirs[-1] == devices
    # A regular file keeps only the last write; the kernel applies each rule as written.
    assert (devices / "devices.deny").read_text() == "c 195:2 rwm"
    no_gpus = cgroups.create(cgroups.Hierarchy(1, root), "task-7-0", 0, 0)
    assert len(no_gpus.dirs) == 2  # memory and cpu only


def test_cgroup_files_v2(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    hierarchy = cgroups.Hierarchy(2, tmp_path)
    cgroup = cgroups.create(hierarchy, "task-4-0", memory_mb=256, cpu=0.5)
    path = tmp_path / "trainhub" / "task-4-0"
    assert cgroup.dirs == (path,)
    assert (path / "memory.max").read_text() == str(256 * 1024 * 1024)
    assert (path / "cpu.max").read_text() == "50000 100000"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory +cpu +pids"
    cgroups.create(hierarchy, "task-5-0", memory_mb=0, cpu=0)
    assert (tmp_path / "trainhub" / "task-5-0" / "memory.max").read_text() == "max"
    assert (tmp_path / "trainhub" / "task-5-0" / "cpu.max").read_text() == "max 100000"


def test_settings(tmp_path: Path) -> None:
    # An unprivileged agent sandboxes as its own user (the probe is skipped for a
    # pretended euid); only an explicit opt-out runs tasks unsandboxed.
    isolation = Isolation.from_settings(tmp_path, {}, euid=1000)
    assert isolation.mode == MODE_SANDBOX_USER and not isolation.isolating
    assert isolation.box is not None and isolation.python == sys.executable
    opted_out = Isolation.from_settings(tmp_path, {"TRAINHUB_TASK_ISOLATION": "none"}, euid=0)
    assert opted_out.mode == MODE_NONE and opted_out.box is None
    assert "NOT sandboxed" in opted_out.describe()
    with pytest.raises(IsolationError, match="TRAINHUB_TASK_ISOLATION"):
        Isolation.from_settings(tmp_path, {"TRAINHUB_TASK_ISOLATION": "yes"}, euid=0)


def test_a_node_without_bubblewrap_fails_closed(tmp_path: Path) -> None:
    env = {"TRAINHUB_BWRAP": str(tmp_path / "no-bwrap")}
    for euid in (0, 1000):
        isolation = Isolation.from_settings(tmp_path, env, euid=euid)
        assert isolation.mode == MODE_UNAVAILABLE and isolation.refuses_tasks
        assert "apt-get install bubblewrap" in isolation.problem
        assert "starts no task" in isolation.describe()
    with pytest.raises(IsolationError, match="bubblewrap is not installed"):
        Isolation.from_settings(tmp_path, {**env, "TRAINHUB_TASK_ISOLATION": "required"}, euid=0)


def test_root_sandboxes_with_leased_uids(tmp_path: Path) -> None:
    require_root()
    base = Path(tempfile.mkdtemp(prefix="trainhub-isolation-", dir="/tmp"))
    try:
        os.chmod(base, 0o711)
        env = {"TRAINHUB_TASK_UID_RANGE": "400000-400999"}
        isolation = Isolation.from_settings(base / "work", env, cgroup_root=tmp_path / "none")
        assert isolation.mode == MODE_SANDBOX and isolation.hierarchy is None
        assert isolation.leases is not None and isolation.leases.uids == range(400000, 401000)
        v1 = _fake_v1(tmp_path / "cg")
        isolation = Isolation.from_settings(base / "work", env, cgroup_root=v1)
        assert isolation.hierarchy == cgroups.Hierarchy(1, v1)
    finally:
        shutil.rmtree(base)


def test_an_unreachable_work_dir_fails_closed(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    isolation = Isolation.from_settings(private / "work", {}, euid=0)
    assert isolation.mode == MODE_UNAVAILABLE
    assert "not reachable by the task uids" in isolation.problem
    with pytest.raises(IsolationError, match="not reachable by the task uids"):
        Isolation.from_settings(private / "work", {"TRAINHUB_TASK_ISOLATION": "required"}, euid=0)


def test_unrunnable_task_python_is_named(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "python").write_text("")
    env = {"TRAINHUB_TASK_PYTHON": str(private / "python"), "TRAINHUB_TASK_ISOLATION": "required"}
    with pytest.raises(IsolationError, match=r"TRAINHUB_TASK_PYTHON=.* cannot be run"):
        Isolation.from_settings(tmp_path, env, euid=0)


def _reachable(path: Path) -> bool:
    return all(p.stat().st_mode & 0o001 for p in [path.resolve(), *path.resolve().parents])


def test_checkpoint_dir_is_owned_by_the_job_uid(tmp_path: Path) -> None:
    require_root()
    root = tmp_path / "checkpoints"
    path = root / "job-3"
    taskdirs.prepare_checkpoint_dir(path, (400003, 400003))
    st = path.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (400003, 400003, 0o700)
    # Another job's identity is refused; a link planted in its place is never followed.
    with pytest.raises(taskdirs.TaskDirError, match="belongs to uid 400003"):
        taskdirs.prepare_checkpoint_dir(path, (400004, 400004))
    target = tmp_path / "target"
    target.mkdir()
    (root / "job-4").symlink_to(target)
    with pytest.raises(taskdirs.TaskDirError, match="not a directory"):
        taskdirs.prepare_checkpoint_dir(root / "job-4", (400004, 400004))
    assert target.stat().st_uid == 0
    # A checkpoint root others may write is refused (they could swap a job's directory).
    os.chmod(root, 0o777)
    with pytest.raises(taskdirs.TaskDirError, match="writable by users other"):
        taskdirs.prepare_checkpoint_dir(path, (400003, 400003))


def test_real_cgroup_v1_or_v2_limits_a_process(tmp_path: Path) -> None:
    require_root()
    hierarchy = cgroups.detect()
    assert hierarchy is not None, "no cgroup hierarchy mounted"
    cgroup = cgroups.create(hierarchy, f"test-{os.getpid()}", memory_mb=64, cpu=0.25, pids_max=32)
    try:
        import subprocess

        fds = cgroup.open_procs()
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", "cat /proc/self/cgroup"],
                stdout=subprocess.PIPE,
                preexec_fn=limits.make_preexec((), None, cgroup_fds=fds),
            )
        finally:
            for fd in fds:
                os.close(fd)
        out, _ = proc.communicate(timeout=10)
        assert f"/trainhub/test-{os.getpid()}" in out.decode()
        memory_file = "memory.max" if hierarchy.version == 2 else "memory.limit_in_bytes"
        assert (cgroup.dirs[0] / memory_file).read_text().strip() == str(64 * 1024 * 1024)
        pids = [d for d in cgroup.dirs if (d / "pids.max").exists()]
        assert pids and (pids[0] / "pids.max").read_text().strip() == "32"
    finally:
        assert cgroups.remove(cgroup)
    assert not any(d.exists() for d in cgroup.dirs)


def test_a_node_that_cannot_sandbox_starts_no_task_and_says_why(tmp_path: Path) -> None:
    from ps_runtime.agent.outbox import Outbox
    from ps_runtime.agent.supervisor import Supervisor

    from .helpers import FAKE_COMMAND, fake_task

    isolation = Isolation.from_settings(tmp_path, {"TRAINHUB_BWRAP": str(tmp_path / "none")})
    outbox = Outbox()
    supervisor = Supervisor(outbox, tmp_path / "work", command=FAKE_COMMAND, isolation=isolation)
    assert supervisor.start(fake_task(mode="serve")) is None
    (status,) = [m.to_wire() for m in outbox.drain()]
    assert status["state"] == "failed"
    assert "cannot sandbox tasks" in status["message"]
    assert "apt-get install bubblewrap" in status["message"]
    assert not supervisor.live_keys() and not (tmp_path / "work" / "tasks" / "31-1").exists()
