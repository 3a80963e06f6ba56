"""A member's first job (issue 28): the submit form's defaults fit the cluster it is on,
so submitting them unedited gets the job running, and it succeeds; a gang larger than the
whole cluster is refused beside its field with the numbers; the job page says what the
job asks for in all."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from ..browser import assert_accessible
from ..cluster import LiveCluster
from .conftest import SignedIn
from .jobs_cleanup import ended_afterwards, jobs_named

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

CPU_FIELDS = ("Coordinator CPU", "CPU per PS", "CPU per worker")


def _counted_nodes(cluster: LiveCluster) -> list[dict[str, Any]]:
    """The nodes whose capacity the cluster counts: those neither draining nor revoked."""
    nodes = cluster.api.get("/nodes/", params={"limit": 1000}).json()["results"]
    return [n for n in nodes if n["state"] != "draining" and not n["credential_revoked_at"]]


def _cluster_cpus(cluster: LiveCluster) -> float:
    return sum(float(n["cpus"]) for n in _counted_nodes(cluster))


def _field_value(page: Page, label: str) -> float:
    return float(page.get_by_label(label, exact=True).input_value())


def test_the_forms_defaults_run_unedited_and_the_page_shows_the_total(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    with as_person("alice") as page, ended_afterwards(live_cluster) as started:
        page.goto(f"{live_cluster.url}/jobs/new/")
        defaults = sum(_field_value(page, label) for label in CPU_FIELDS)
        assert defaults <= _cluster_cpus(live_cluster) + 1e-9
        expect(page.get_by_label("Name", exact=True)).to_have_value("movielens-mf")  # unedited
        page.get_by_role("button", name="Check").click()
        expect(page.locator("#preview .preview")).to_contain_text("Fits now")
        page.get_by_role("button", name="Submit job").click()
        page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        started.append(job_id)

        spec = live_cluster.job(job_id)["spec"]
        roles = (spec["coordinator"], spec["parameter_servers"], spec["workers"])
        counts = (1, spec["parameter_servers"]["replicas"], spec["workers"]["min"])
        cpu = sum(n * r["resources"]["cpu"] for n, r in zip(counts, roles, strict=True))
        memory = sum(n * r["resources"]["memory_mb"] for n, r in zip(counts, roles, strict=True))
        assert cpu == pytest.approx(defaults)
        total = page.locator("#job-request")
        expect(total).to_contain_text(f"{cpu:g} CPUs, {memory} MiB of memory, 0 GPUs")
        expect(total).to_contain_text("1 parameter server and 1 worker together")

        live_cluster.wait_state(job_id, {"running", "succeeded"}, timeout=120)
        done = live_cluster.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 300)
        assert done["state"] == "succeeded", live_cluster.logs(job_id)
        assert_accessible(page)


def test_a_gang_larger_than_the_cluster_is_refused_beside_its_field(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    cluster_cpus = _cluster_cpus(live_cluster)
    count = len(_counted_nodes(live_cluster))
    nodes = f"{count} node{'' if count == 1 else 's'}"
    with as_person("alice") as page:
        page.goto(f"{live_cluster.url}/jobs/new/")
        page.get_by_label("Name", exact=True).fill("too-big")
        workers = math.floor(cluster_cpus) + 1
        page.get_by_label("Workers (min)").fill(str(workers))
        page.get_by_label("Workers (max)").fill(str(workers))
        per_worker = _field_value(page, "CPU per worker")
        need = _field_value(page, "Coordinator CPU") + _field_value(page, "CPU per PS")
        need += workers * per_worker
        numbers = (
            f"needs {need:g} CPUs in all",
            f"{workers} workers of {per_worker:g} each",
            f"the whole cluster has {cluster_cpus:g} ({nodes})",
        )

        # "Check" says it before anything is submitted...
        page.get_by_role("button", name="Check").click()
        preview = page.locator("#preview .preview-invalid")
        expect(preview).to_contain_text("workers.resources.cpu")
        for text in numbers:
            expect(preview).to_contain_text(text)

        # ...and the submission is refused with the numbers beside CPU per worker.
        page.get_by_role("button", name="Submit job").click()
        beside = page.locator('[id="id_workers.resources.cpu_error"]')
        for text in numbers:
            expect(beside).to_contain_text(text)
        expect(page.get_by_label("Workers (min)")).to_have_value(str(workers))  # kept
        assert jobs_named(live_cluster, "too-big") == []
        assert_accessible(page)
