"""`python -m ps_runtime.task`: run one task of a job (the command the agent, `python -m
ps_runtime.launch` and docs/protocol.md §2 name); the code is `ps_runtime.launch.task`."""

from __future__ import annotations

import os
import sys

from ps_runtime.launch.task import main, restore_signal_defaults

if __name__ == "__main__":
    restore_signal_defaults()
    code = main()
    sys.stdout.flush()
    # grpc's background threads can delay interpreter exit; the outcome is decided.
    os._exit(code)
