"""The scheduling simulator: replays a trace through the same policy code, no Django."""

from __future__ import annotations

from .engine import Simulator
from .inputs import Cluster, InputError, TraceJob, cluster_from_dict, load_cluster, load_trace
from .report import Report, jain

__all__ = [
    "Cluster",
    "InputError",
    "Report",
    "Simulator",
    "TraceJob",
    "cluster_from_dict",
    "jain",
    "load_cluster",
    "load_trace",
]
