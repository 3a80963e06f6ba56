"""Stand-in for `python -m ps_runtime.task` in agent tests (run as a script, not imported).

TRAINHUB_FAKE_MODE: "exit" (print, report, exit with TRAINHUB_FAKE_EXIT_CODE), "serve"
(print, report, wait for SIGTERM), "stubborn" (ignore SIGTERM: only SIGKILL ends it),
"grandchild" (spawn a grandchild; both ignore SIGTERM; print its pid), "flood" (print
TRAINHUB_FAKE_LINES numbered lines at once, then exit 0), "chatty" (a numbered line
every 10 ms until SIGTERM).
"""

import json
import os
import resource
import signal
import subprocess
import sys
import time

mode = os.environ.get("TRAINHUB_FAKE_MODE", "exit")
if mode == "flood":
    for i in range(int(os.environ["TRAINHUB_FAKE_LINES"])):
        print(f"flood line {i:06d} " + "x" * 40)
    sys.exit(0)
if mode == "chatty":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    for i in range(1_000_000):
        print(f"chatty line {i:06d}", flush=True)
        time.sleep(0.01)
if mode == "serve":
    # Before any output: a test that saw this task's first line can rely on a clean stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
elif mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("hello from task", flush=True)
print("a warning", file=sys.stderr, flush=True)
info = {
    "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "role": os.environ.get("TRAINHUB_ROLE"),
    "affinity": sorted(os.sched_getaffinity(0)),
    "rlimit_as": resource.getrlimit(resource.RLIMIT_AS)[0],
    "pgid_is_pid": os.getpgid(0) == os.getpid(),
    "sid": os.getsid(0),
    "parent": open(f"/proc/{os.getppid()}/cmdline").read(),
    "cwd": os.getcwd(),
    "tls": {
        name: os.environ.get(name)
        for name in ("TRAINHUB_TLS_CERT", "TRAINHUB_TLS_KEY", "TRAINHUB_TLS_CA")
    },
}
print("INFO " + json.dumps(info), flush=True)
fd = os.environ.get("TRAINHUB_METRICS_FD")
if fd:
    with os.fdopen(int(fd), "w", buffering=1) as metrics:
        metrics.write(
            json.dumps(
                {"step": 10, "time": "2025-01-01T00:00:00+00:00", "values": {"train_loss": 0.93}}
            )
            + "\n"
        )
        metrics.write("this is not json\n")
        if mode == "exit":
            metrics.write(json.dumps({"step": 11, "values": {"train_loss": 0.5}}) + "\n")

if mode == "exit":
    sys.exit(int(os.environ.get("TRAINHUB_FAKE_EXIT_CODE", "0")))
elif mode == "grandchild":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
        ]
    )
    print(f"GRANDCHILD {child.pid}", flush=True)
    time.sleep(600)
else:
    while True:
        time.sleep(0.1)
