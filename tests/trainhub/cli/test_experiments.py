"""`trainhub search`, `experiments` and `experiment` against a live server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from trainhub.experiments.models import Experiment
from trainhub.tenancy.choices import Role

from ..factories import make_node, make_team, make_user
from .helpers import login, trainhub

pytestmark = pytest.mark.django_db(transaction=True)

EXPERIMENT_YAML = """\
name: mf-search
team: recsys
entrypoint: ps_runtime.examples.movielens:train
args: {epochs: 1}
parameter_servers: {replicas: 1, resources: {cpu: 0.5, memory_mb: 512}}
workers: {min: 1, max: 1, resources: {cpu: 0.5, memory_mb: 512}}
coordinator: {resources: {cpu: 0.5, memory_mb: 512}}
search:
  method: asha
  metric: test_rmse
  max_trials: 6
  max_concurrent: 2
  max_budget: 9
  params:
    lr: {type: log_uniform, low: 0.001, high: 0.1}
    dim: {type: categorical, values: [8, 16, 32]}
"""


@pytest.fixture
def config(live_server: Any, tmp_path: Path, settings: Any) -> Path:
    settings.EVENT_HANDLERS = []
    cache.clear()
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=4, memory_mb=8192)
    make_node(cpus=8, memory_mb=32768)
    path = tmp_path / "cli.json"
    login(path, live_server.url, "alice", "pw-alice")
    return path


def test_search_starts_an_experiment_and_experiment_shows_and_cancels_it(
    config: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "experiment.yaml"
    spec.write_text(EXPERIMENT_YAML)
    done = trainhub(config, "search", str(spec))
    assert done.returncode == 0, done.stderr
    pk = Experiment.objects.get().pk
    assert f"started experiment {pk} (mf-search, team recsys): 2 trials so far" in done.stdout

    listed = trainhub(config, "experiments")
    assert listed.returncode == 0 and "mf-search" in listed.stdout and "running" in listed.stdout
    shown = trainhub(config, "experiment", str(pk))
    assert shown.returncode == 0, shown.stderr
    assert "asha on test_rmse (minimize)" in shown.stdout
    assert "TRIAL  LR" in shown.stdout and "DIM" in shown.stdout
    cancelled = trainhub(config, "experiment", str(pk), "cancel", "--json")
    assert cancelled.returncode == 0 and json.loads(cancelled.stdout)["state"] == "cancelled"
    again = trainhub(config, "experiment", str(pk), "cancel")
    assert again.returncode == 1 and "already cancelled" in again.stderr


def test_a_bad_search_field_is_named_and_nothing_starts(config: Path, tmp_path: Path) -> None:
    spec = tmp_path / "experiment.yaml"
    spec.write_text(EXPERIMENT_YAML.replace("max_concurrent: 2", "max_concurrent: 0"))
    done = trainhub(config, "search", str(spec))
    assert done.returncode == 1
    assert "search.max_concurrent" in done.stderr and "whole number from 1" in done.stderr
    assert not Experiment.objects.exists()
