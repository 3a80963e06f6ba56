"""Read-side queries about jobs, including what each node should be running."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

from django.conf import settings

from trainhub.nodes.models import Node

from .choices import JOB_PLACED, TASK_ACTIVE, DesiredState, JobState, TaskRole
from .models import Job, Task

# A preempted job's PS shards and workers keep serving while its coordinator checkpoints.
JOB_SERVING = JOB_PLACED | {JobState.PREEMPTED}


def desired_tasks(node: Node) -> list[dict[str, Any]]:
    """The tasks that should be running on `node`, in the agent protocol's shape."""
    mine = list(
        Task.objects.filter(
            node=node,
            desired=DesiredState.RUN,
            state__in=TASK_ACTIVE,
            job__state__in=JOB_SERVING,
        ).select_related("job", "node")
    )
    job_ids = {t.job_id for t in mine}
    peers: dict[int, dict[str, list[str]]] = defaultdict(lambda: {"ps": [], "worker": []})
    for peer in (
        Task.objects.filter(
            job_id__in=job_ids,
            role__in=[TaskRole.PS, TaskRole.WORKER],
            desired=DesiredState.RUN,
            state__in=TASK_ACTIVE,
        )
        .select_related("node")
        .order_by("job_id", "role", "index")
    ):
        if peer.address:
            peers[peer.job_id][peer.role].append(peer.address)
    return [_task_document(t, peers[t.job_id]) for t in mine]


def _task_document(task: Task, cluster: dict[str, list[str]]) -> dict[str, Any]:
    job: Job = task.job
    env = {
        "TRAINHUB_JOB_ID": str(job.pk),
        "TRAINHUB_TASK_ID": str(task.pk),
        "TRAINHUB_ROLE": task.role,
        "TRAINHUB_TASK_INDEX": str(task.index),
        "TRAINHUB_CLUSTER": json.dumps(cluster),
        "TRAINHUB_JOB_TOKEN": job.runtime_token,
        "TRAINHUB_CHECKPOINT_DIR": os.path.join(settings.CHECKPOINT_ROOT, f"job-{job.pk}"),
    }
    if task.port is not None and task.node is not None:
        env["TRAINHUB_BIND"] = f"{task.node.address}:{task.port}"
    if task.role == TaskRole.COORDINATOR:
        env["TRAINHUB_ENTRYPOINT"] = job.spec["entrypoint"]
        env["TRAINHUB_ARGS"] = json.dumps(job.spec.get("args", {}))
        env["TRAINHUB_CHECKPOINT_EVERY_SECONDS"] = str(job.spec["checkpoint_every_seconds"])
    document: dict[str, Any] = {
        "id": task.pk,
        "job_id": job.pk,
        "role": task.role,
        "index": task.index,
        "attempt": task.attempt,
        "resources": {
            "cpu": task.cpu,
            "memory_mb": task.memory_mb,
            "gpu_indices": task.gpu_indices,
        },
        "env": env,
    }
    if task.role == TaskRole.COORDINATOR:
        # Time to save a checkpoint when stopped (preemption), before SIGKILL.
        document["stop_grace_seconds"] = settings.PREEMPTION_GRACE_SECONDS
    return document
