"""Kinds of pending reasons: the few words a dashboard groups waiting jobs by.

The policy words each reason for people, with numbers ("team quota exhausted: cpu 0/2");
`kind_of` maps it to a short, stable label (`team_quota`) for `/metrics`. The prefixes
are the policy's own wording (`policy/quota.py`, `policy/placement.py`, `policy/cfs.py`,
`policy/reclaim.py`, `policy/baselines.py`), the job services' and the cycle's own for a
job the cluster can never hold (`never_fits.py`); a reason none of them starts is `other`.
"""

from __future__ import annotations

KINDS: tuple[tuple[str, str], ...] = (
    ("waiting for the scheduler", "not_scheduled_yet"),
    ("waiting for the next scheduling cycle", "not_scheduled_yet"),
    ("requeued after a preemption", "requeued"),
    ("held:", "held"),
    ("waiting behind job", "queue_order"),
    ("capacity reclaimed for it", "reclaiming"),
    ("its team's idle quota is lent out", "quota_lent_out"),
    ("team quota exhausted", "team_quota"),
    ("can never start on this cluster", "never_fits"),
    ("no nodes are available", "no_nodes"),
    ("the nodes with room run tasks of another team", "isolation"),
    ("no node has", "no_node_fits"),
    ("not enough free", "cluster_full"),
    ("free resources are fragmented", "fragmented"),
)


def kind_of(reason: str) -> str:
    """The label of a pending reason (`other` for one no prefix matches)."""
    for prefix, kind in KINDS:
        if reason.startswith(prefix):
            return kind
    return "other"
