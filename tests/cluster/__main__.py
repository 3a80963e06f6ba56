"""`make cluster`: the production-like cluster of tests/cluster/harness.py, kept running
until Ctrl-C; prints where to sign in."""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path

from tests.cluster.harness import production_cluster
from tests.e2e.cluster import ADMIN


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="trainhub-cluster-run-") as tmp:
        print("starting PostgreSQL, Redis, nginx, 2 web processes, 2 workers, beat, 3 agents…")
        with production_cluster(Path(tmp)) as cluster:
            print(f"\nTrainHub: {cluster.url}  (sign in as {ADMIN[0]} / {ADMIN[1]})")
            print(f"its certificate is trusted by the CA bundle {cluster.ca_bundle}")
            print(f"hosts: {', '.join(f'{h.name} ({h.address})' for h in cluster.hosts)}")
            print(f"logs: {Path(tmp) / 'logs'}\nCtrl-C stops everything.")
            try:
                while True:
                    signal.pause()
            except KeyboardInterrupt:
                print("stopping…")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    main()
