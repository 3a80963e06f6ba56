"""A task that attacks its node: run by the sandbox tests as a job's own code.

The mode (TRAINHUB_PROBE_MODE) picks the attack; each prints one JSON line saying what it
could do (True: the attack worked). Paths to aim at come in TRAINHUB_PROBE_* variables,
the only kind besides the job's own that reach a task.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ENV = os.environ


def _can(action: str) -> bool:
    try:
        if action == "read_other_dir":
            os.listdir(ENV["TRAINHUB_PROBE_OTHER_DIR"])
        elif action == "read_other_checkpoints":
            os.listdir(ENV["TRAINHUB_PROBE_OTHER_CHECKPOINTS"])
        elif action == "read_credential":
            Path(ENV["TRAINHUB_PROBE_CREDENTIAL"]).read_bytes()
        elif action == "list_credential_dir":
            os.listdir(Path(ENV["TRAINHUB_PROBE_CREDENTIAL"]).parent)
        elif action == "read_agent_table":
            Path(ENV["TRAINHUB_PROBE_AGENT_DIR"], "tasks.json").read_bytes()
        elif action == "signal_other":
            os.kill(int(ENV["TRAINHUB_PROBE_OTHER_PID"]), 0)
        elif action == "signal_other_group":
            os.killpg(int(ENV["TRAINHUB_PROBE_OTHER_PID"]), signal.SIGTERM)
        elif action == "write_own_scratch":
            Path("own.txt").write_text("mine")
        elif action == "write_own_checkpoints":
            Path(ENV["TRAINHUB_CHECKPOINT_DIR"], "ckpt").write_text("mine")
        elif action == "write_runtime":
            import ps_runtime

            Path(ps_runtime.__file__).with_name("planted.py").write_text("owned")
        elif action == "write_cluster_file":
            Path(ENV["TRAINHUB_CLUSTER_FILE"]).write_text("{}")
        elif action == "become_root":
            os.setuid(0)
        elif action == "new_user_namespace":
            done = subprocess.run(["unshare", "--user", "true"], capture_output=True, check=False)
            return done.returncode == 0
        return True
    except (OSError, KeyError, ValueError):
        return False


def report() -> dict[str, object]:
    actions = [
        "read_other_dir",
        "read_other_checkpoints",
        "read_credential",
        "list_credential_dir",
        "read_agent_table",
        "signal_other",
        "signal_other_group",
        "write_own_scratch",
        "write_own_checkpoints",
        "write_runtime",
        "write_cluster_file",
        "become_root",
        "new_user_namespace",
    ]
    result: dict[str, object] = {action: _can(action) for action in actions}
    result["uid"] = os.getuid()
    result["gid"] = os.getgid()
    result["groups"] = os.getgroups()
    result["env"] = sorted(ENV)
    result["cgroup"] = Path("/proc/self/cgroup").read_text()
    result["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    result["dev"] = sorted(os.listdir("/dev"))
    result["root"] = sorted(os.listdir("/"))
    result["import_ps_runtime"] = _imports()
    return result


def race() -> dict[str, object]:
    """Swap the code directories of the job's next task attempts for links to a victim
    directory while the agent unpacks them (TRAINHUB_PROBE_RACE_DIRS: a pattern with
    {n}), until asked to stop; count the swaps that got in."""
    pattern = ENV["TRAINHUB_PROBE_RACE_DIRS"]
    victim = ENV["TRAINHUB_PROBE_VICTIM"]
    rounds = int(ENV.get("TRAINHUB_PROBE_RACE_ROUNDS", "50"))
    stop = Path(ENV.get("TRAINHUB_CHECKPOINT_DIR", "/nonexistent"), "stop-racing")
    swapped = 0
    tries = 0
    print("racing", flush=True)
    while not stop.exists():
        for n in range(1, rounds + 1):
            code = pattern.format(n=n)
            tries += 1
            try:
                os.rename(code, code + ".old")
                os.symlink(victim, code)
                swapped += 1
            except OSError:
                pass
        time.sleep(0.001)
    return {"swapped": swapped, "tries": tries}


def main() -> None:
    mode = ENV.get("TRAINHUB_PROBE_MODE", "report")
    if mode == "escape":
        # A child in a session of its own leaves the task's process group behind.
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
        )
        print("ESCAPED", flush=True)
        return
    if mode == "hog":
        # Touch every page: resident memory, which only a cgroup bounds.
        hog = bytearray(int(ENV["TRAINHUB_PROBE_HOG_MB"]) * 1024 * 1024)
        for i in range(0, len(hog), 4096):
            hog[i] = 1
        print("survived", flush=True)
        return
    if mode == "fill":
        # Write past the scratch's size: the tmpfs says no.
        with open("big", "wb") as out:
            for _ in range(int(ENV["TRAINHUB_PROBE_FILL_MB"])):
                out.write(b"x" * 1024 * 1024)
        print("filled", flush=True)
        return
    if mode == "victim":
        Path("secret.txt").write_text("job token of the victim")
        Path(ENV["TRAINHUB_CHECKPOINT_DIR"], "ckpt").write_text("victim checkpoint")
        print("ready", flush=True)
        time.sleep(120)
        return
    if mode == "graceful":
        # A task that takes its time to stop, as a checkpointing coordinator does.
        def stop(*_: object) -> None:
            time.sleep(0.5)
            print("saved", flush=True)
            raise SystemExit(3)

        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(120)
        return
    if mode == "race":
        print(json.dumps(race()), flush=True)
        return
    if mode == "quick":
        print(json.dumps({"code": sorted(os.listdir(ENV["TRAINHUB_CODE_DIR"]))}), flush=True)
        return
    print(json.dumps(report()), flush=True)
    if mode == "report-and-wait":
        time.sleep(120)


def _imports() -> bool:
    try:
        import numpy  # noqa: F401

        import ps_runtime.task  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
