"""A task that tries to reach another job: run as a script by test_task_isolation.py.

Prints one JSON line: what it could do (each probe is True when it succeeded).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _can(action: str) -> bool:
    try:
        if action == "read_other_dir":
            os.listdir(os.environ["TRAINHUB_PROBE_OTHER_DIR"])
        elif action == "read_other_file":
            Path(os.environ["TRAINHUB_PROBE_OTHER_DIR"], "secret.txt").read_text()
        elif action == "read_other_checkpoints":
            os.listdir(os.environ["TRAINHUB_PROBE_OTHER_CHECKPOINTS"])
        elif action == "read_credential":
            Path(os.environ["TRAINHUB_PROBE_CREDENTIAL"]).read_text()
        elif action == "signal_other":
            os.kill(int(os.environ["TRAINHUB_PROBE_OTHER_PID"]), 0)
        elif action == "signal_other_group":
            os.killpg(int(os.environ["TRAINHUB_PROBE_OTHER_PID"]), signal.SIGTERM)
        elif action == "write_own_dir":
            Path("own.txt").write_text("mine")
        elif action == "write_own_checkpoints":
            Path(os.environ["TRAINHUB_CHECKPOINT_DIR"], "ckpt").write_text("mine")
        return True
    except OSError:
        return False


def main() -> None:
    if os.environ.get("TRAINHUB_PROBE_MODE") == "escape":
        # A child in a session of its own leaves the task's process group behind.
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
        )
        print(f"ESCAPED {child.pid}", flush=True)
        return
    if os.environ.get("TRAINHUB_PROBE_MODE") == "hog":
        # Touch every page: resident memory, which only a cgroup bounds.
        hog = bytearray(int(os.environ["TRAINHUB_PROBE_HOG_MB"]) * 1024 * 1024)
        for i in range(0, len(hog), 4096):
            hog[i] = 1
        print("survived", flush=True)
        return
    if os.environ.get("TRAINHUB_PROBE_MODE") == "victim":
        Path("secret.txt").write_text("job token of the victim")
        Path(os.environ["TRAINHUB_CHECKPOINT_DIR"], "ckpt").write_text("victim checkpoint")
        print("ready", flush=True)
        time.sleep(60)
        return
    actions = [
        "read_other_dir",
        "read_other_file",
        "read_other_checkpoints",
        "read_credential",
        "signal_other",
        "signal_other_group",
        "write_own_dir",
        "write_own_checkpoints",
    ]
    result: dict[str, object] = {action: _can(action) for action in actions}
    result["uid"] = os.getuid()
    result["gid"] = os.getgid()
    result["groups"] = os.getgroups()
    result["env"] = sorted(os.environ)
    result["cgroup"] = Path("/proc/self/cgroup").read_text()
    result["import_ps_runtime"] = _imports()
    print(json.dumps(result), flush=True)


def _imports() -> bool:
    try:
        import numpy  # noqa: F401

        import ps_runtime.task  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
