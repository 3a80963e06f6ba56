"""Dry runs timed on the platform (`bench/scheduler_platform.py` prints them): on this
process's warm cluster cache, and reading the whole cluster each time as before it."""

from __future__ import annotations

import statistics
import time
from typing import Any


def time_dry_run(spec: dict[str, Any], repeat: int) -> dict[str, float]:
    """Median seconds of `POST jobs/?dry_run=true`'s work (validation aside) for `spec`:
    the cluster, the policy, the forecast of the start.

    `dry_run_s`: on this process's warm cache (`scheduling/cache.py`: the version check,
    nothing else read); `dry_run_cold_s`: the earlier path, the whole cluster read from
    the database for each (`snapshot.read_cluster`); `dry_run_first_s`: the first one on
    an empty cache (it reads every row)."""
    from django.utils import timezone
    from trainhub.jobs.jobspec import JobSpec
    from trainhub.scheduling import cache, preview
    from trainhub.scheduling.snapshot import read_cluster

    asked = JobSpec.from_dict(spec)

    def once() -> float:
        t0 = time.perf_counter()
        preview.preview_submission(asked, now=timezone.now())
        return time.perf_counter() - t0

    cache._cache = cache.ClusterCache()
    first = once()
    warm = statistics.median(once() for _ in range(repeat))
    cached = preview.cluster_view
    preview.cluster_view = read_cluster  # the path before the cache
    try:
        cold = statistics.median(once() for _ in range(repeat))
    finally:
        preview.cluster_view = cached
    return {
        "dry_run_s": round(warm, 3),
        "dry_run_cold_s": round(cold, 3),
        "dry_run_first_s": round(first, 3),
    }
