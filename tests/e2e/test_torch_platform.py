"""PyTorch models as TrainHub jobs (issue 27): the examples in `examples/torch_recsys/`
uploaded as a code archive whose requirements.txt asks for `torch`, run through the whole
platform (services mode, a root agent that builds the job's environment with uv and
sandboxes every task) on 1 PS + 2 workers, on the CPU:

- the DLRM-style click model reaches test AUC ≥ 0.80 on its generated data (where a
  logistic regression gets ≤ 0.76: tests/examples/test_torch_examples.py);
- biased MF in torch reaches test RMSE ≤ 0.925 on ml-100k u1 (when ../shared has it; else
  on generated ratings in the same format).

The node's package settings pin torch to the version this test's own environment has (an
operator pins the build that fits the node's CUDA the same way, `UV_CONSTRAINT`); uv's
cache is kept between runs (`TRAINHUB_ENV_CACHE`) so only the first run downloads.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..archive_builders import tar_gz
from ..conftest import require_services
from .cluster import SHARED_UDATA, LiveCluster, fresh_database, movielens_file, services_cluster

pytestmark = [pytest.mark.services, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "torch_recsys"
UV_CACHE = Path("/tmp/trainhub-e2e-uv-cache")
TASK = {"cpu": 0.5, "memory_mb": 3072}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    import torch

    database_url, redis_url = require_services()
    tmp: Path = tmp_path_factory.mktemp("torch")
    constraints = tmp / "node-constraints.txt"
    constraints.write_text(f"torch=={torch.__version__}\n")
    agent_env = {"UV_CONSTRAINT": str(constraints), "TRAINHUB_ENV_CACHE": str(UV_CACHE)}
    redis_e2e = redis_url.rsplit("/", 1)[0] + "/12"
    with (
        fresh_database(database_url) as db_url,
        services_cluster(db_url, redis_e2e, tmp, agent_env=agent_env) as live,
    ):
        yield live


@pytest.fixture(scope="module")
def code(cluster: LiveCluster) -> str:
    files = {p.name: p.read_bytes() for p in sorted(EXAMPLES.iterdir()) if p.is_file()}
    assert files["requirements.txt"].decode().split() == ["torch"]
    response = cluster.api.post(
        "/code/", files={"file": ("torch_recsys.tar.gz", io.BytesIO(tar_gz(files)))}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["digest"])


def run(cluster: LiveCluster, name: str, code: str, entrypoint: str, **args: Any) -> dict[str, Any]:
    job = cluster.submit(
        name=name,
        team="recsys",
        entrypoint=entrypoint,
        args=args,
        code=code,
        parameter_servers={"replicas": 1, "resources": TASK},
        workers={"min": 2, "max": 2, "resources": TASK},
        coordinator={"resources": {"cpu": 0.5, "memory_mb": 3072}},
        max_restarts=0,
    )
    # The spec's environment came from the archive's requirements.txt.
    assert job["spec"]["environment"]["requirements"] == ["torch"]
    done = cluster.wait_state(job["id"], {"succeeded", "failed"}, timeout=900)
    logs = cluster.logs(job["id"])
    assert done["state"] == "succeeded", logs
    result = next(
        json.loads(line.split("] ", 1)[1])["result"]
        for line in reversed(logs.splitlines())
        if '{"result":' in line
    )
    return dict(result)


def test_the_dlrm_example_learns_the_interactions(cluster: LiveCluster, code: str) -> None:
    result = run(cluster, "dlrm", code, "dlrm:train", examples=200_000, epochs=2)
    print("DLRM on the platform:", {k: result.get(k) for k in ("test_auc", "examples_per_sec")})
    assert result["test_auc"] >= 0.80, result


def test_the_torch_mf_example_reaches_the_rmse_bar(
    cluster: LiveCluster, code: str, tmp_path: Path
) -> None:
    if SHARED_UDATA.exists():  # ml-100k's own split
        data = {
            "data": str(SHARED_UDATA.parent / "u1.base"),
            "test": str(SHARED_UDATA.parent / "u1.test"),
        }
    else:  # generated ratings in u.data's format (a seeded 80/20 split)
        data = {"data": str(movielens_file(tmp_path))}
    # A little more regularisation than TF's workload (bench/torch_ps.py matches that one):
    # 0.920 on u1 instead of 0.923, a margin for the asynchronous workers' variance.
    result = run(cluster, "torch-mf", code, "mf:train", l2=0.08, epochs=25, **data)
    print(
        "torch MF on the platform:",
        {k: result[k] for k in ("test_rmse", "examples_per_sec", "steps")},
    )
    assert result["test_rmse"] <= 0.925, result
