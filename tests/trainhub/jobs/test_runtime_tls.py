"""The runtime's TLS: a CA per job, a certificate per node address, delivered only to the
node that runs the task, keys sealed at rest and never shown to users."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.jobs import pki
from trainhub.jobs.choices import TaskRole
from trainhub.jobs.models import RuntimeCA, RuntimeCertificate
from trainhub.jobs.selectors import desired_tasks
from trainhub.jobs.services import Placement, Start, place_job, place_jobs, rescale_workers
from trainhub.jobs.services.tls import UNSIGNED, SealError, _signed, seal, unseal
from trainhub.nodes.models import Node

from ps_runtime.agent.protocol import DESIRED_TASKS_PATH, TaskTLS, parse_desired_tasks

from ..factories import gang_placements, make_job, make_node
from .conftest import World

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


# -- issuance (pure) -------------------------------------------------------------------


def _san(cert: x509.Certificate) -> list[Any]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [*names.get_values_for_type(x509.IPAddress), *names.get_values_for_type(x509.DNSName)]


def test_the_job_ca_signs_a_leaf_naming_the_node_address() -> None:
    ca = pki.issue_ca(12, NOW)
    ca_cert = ca.certificate
    constraints = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    assert "job 12" in ca_cert.subject.rfc4514_string()

    by_ip = pki.issue_leaf(ca, "10.0.0.5", NOW).certificate
    by_ip.verify_directly_issued_by(ca_cert)  # raises unless the CA signed it
    assert _san(by_ip) == [ipaddress.ip_address("10.0.0.5")]
    assert not by_ip.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    by_name = pki.issue_leaf(ca, "gpu-7.example.net", NOW).certificate
    assert _san(by_name) == ["gpu-7.example.net"]

    # Valid from slightly before now (clock skew) until the CA's own end, no longer.
    assert by_ip.not_valid_before_utc == NOW - pki.CLOCK_SKEW
    assert by_ip.not_valid_after_utc == NOW + pki.VALIDITY == ca_cert.not_valid_after_utc
    later = pki.issue_leaf(ca, "10.0.0.5", NOW + timedelta(days=100)).certificate
    assert later.not_valid_after_utc == ca_cert.not_valid_after_utc

    # Another CA, even one of the same name, did not sign it.
    with pytest.raises(InvalidSignature):
        by_ip.verify_directly_issued_by(pki.issue_ca(12, NOW).certificate)
    with pytest.raises(ValueError, match="subject does not match"):
        by_ip.verify_directly_issued_by(pki.issue_ca(13, NOW).certificate)


def test_private_keys_stay_out_of_reprs() -> None:
    leaf = pki.issue_leaf(pki.issue_ca(1, NOW), "10.0.0.5", NOW)
    assert "PRIVATE KEY" in leaf.key
    assert "PRIVATE" not in repr(leaf)
    material = TaskTLS(cert=leaf.cert, key=leaf.key, ca=leaf.cert)
    assert "PRIVATE" not in repr(material) and leaf.key[40:80] not in repr(material)


@pytest.mark.parametrize(
    ("mode", "hosts", "wanted"),
    [
        ("auto", ["10.0.0.1", "10.0.0.2"], True),
        ("auto", ["10.0.0.1"], True),  # a node's address is reachable from elsewhere
        ("auto", ["127.0.0.1", "127.0.0.2", "localhost", "::1"], False),
        ("auto", ["127.0.0.1", "node-b.example"], True),
        ("on", ["127.0.0.1"], True),
        ("off", ["10.0.0.1", "10.0.0.2"], False),
    ],
)
def test_tls_is_wanted_unless_loopback_or_opted_out(
    mode: str, hosts: list[str], wanted: bool
) -> None:
    assert pki.tls_wanted(mode, hosts) is wanted


# -- storage ---------------------------------------------------------------------------


def test_keys_are_sealed_with_the_secret_key(settings: Any) -> None:
    key = pki.issue_ca(1, NOW).key
    sealed = seal(key)
    assert "PRIVATE" not in sealed and unseal(sealed) == key
    old = settings.SECRET_KEY
    settings.SECRET_KEY = "a-new-secret-" + "x" * 50
    with pytest.raises(SealError, match="SECRET_KEY_FALLBACKS"):
        unseal(sealed)
    settings.SECRET_KEY_FALLBACKS = [old]
    assert unseal(sealed) == key


def test_the_fallback_keys_come_from_the_environment() -> None:
    code = "from django.conf import settings; print(settings.SECRET_KEY_FALLBACKS)"
    env = {**os.environ, "TRAINHUB_SECRET_KEY_FALLBACKS": " old-1 ,old-2,, "}
    done = subprocess.run(
        [sys.executable, "-m", "trainhub.cli", "manage", "shell", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == "['old-1', 'old-2']"


# -- placement and delivery ------------------------------------------------------------


def _two_hosts(world: World) -> tuple[Any, Node, Node]:
    """A job whose PS runs on one node and coordinator and worker on another."""
    a, _ = make_node("node-a", address="10.1.0.1")
    b, _ = make_node("node-b", address="10.1.0.2")
    job = make_job(world.alice)
    placements = gang_placements(job, a)
    placements[1] = Placement(TaskRole.PS, 0, b.pk, 41000, 0.5, 512)
    assert place_job(job=job, placements=placements, now=timezone.now())
    return job, a, b


def test_a_cross_host_job_gets_a_ca_and_each_node_only_its_own_certificate(
    world: World,
) -> None:
    job, a, b = _two_hosts(world)
    assert RuntimeCA.objects.get(job=job).cert == UNSIGNED  # until a node asks

    on_a = [t for t in desired_tasks(a).tasks if t.job_id == job.pk]
    on_b = [t for t in desired_tasks(b).tasks if t.job_id == job.pk]
    ca = x509.load_pem_x509_certificate(RuntimeCA.objects.get(job=job).cert.encode())
    assert sorted(t.role for t in on_a) == ["coordinator", "worker"]
    assert [t.role for t in on_b] == ["ps"]
    for tasks, host in ((on_a, "10.1.0.1"), (on_b, "10.1.0.2")):
        for task in tasks:
            assert task.tls is not None
            leaf = x509.load_pem_x509_certificate(task.tls.cert.encode())
            leaf.verify_directly_issued_by(ca)
            assert _san(leaf) == [ipaddress.ip_address(host)]
            assert x509.load_pem_x509_certificate(task.tls.ca.encode()) == ca
            # The key is the leaf's own.
            key = serialization.load_pem_private_key(task.tls.key.encode(), None)
            assert key.public_key() == leaf.public_key()
            # The platform never puts file paths of its own in the task's env.
            assert not any(name.startswith("TRAINHUB_TLS_") for name in task.env)
    assert on_a[0].tls != on_b[0].tls and on_a[0].tls == on_a[1].tls
    # One certificate per node, issued once, its key sealed at rest.
    assert RuntimeCertificate.objects.filter(job=job).count() == 2
    desired_tasks(a)
    assert RuntimeCertificate.objects.filter(job=job).count() == 2
    for stored in RuntimeCertificate.objects.filter(job=job):
        assert "PRIVATE" not in stored.sealed_key
    assert "PRIVATE" not in RuntimeCA.objects.get(job=job).sealed_key

    # A node running nothing of the job hears nothing of it.
    c, _ = make_node("node-c", address="10.1.0.3")
    assert desired_tasks(c).tasks == ()
    assert not RuntimeCertificate.objects.filter(job=job, host="10.1.0.3").exists()


def test_a_batched_start_gets_the_same_material_as_a_single_one(world: World) -> None:
    """A cycle's batched starts leave the CA to the first node that asks, as place_job
    does."""
    a, _ = make_node("node-a", address="10.1.0.1")
    b, _ = make_node("node-b", address="10.1.0.2")
    job = make_job(world.alice)
    placements = gang_placements(job, a)
    placements[1] = Placement(TaskRole.PS, 0, b.pk, 41000, 0.5, 512)
    hosts = ["10.1.0.1", "10.1.0.2"]
    place_jobs([Start(job, placements, hosts)], now=timezone.now(), tls_mode="auto")
    assert RuntimeCA.objects.get(job=job).cert == UNSIGNED
    material = {
        node.pk: [t for t in desired_tasks(node).tasks if t.job_id == job.pk] for node in (a, b)
    }
    stored = RuntimeCA.objects.get(job=job)
    assert stored.cert and "PRIVATE" not in stored.sealed_key
    ca = x509.load_pem_x509_certificate(stored.cert.encode())
    for tasks in material.values():
        for task in tasks:
            assert task.tls is not None and task.tls.ca == stored.cert
            x509.load_pem_x509_certificate(task.tls.cert.encode()).verify_directly_issued_by(ca)


def test_two_nodes_asking_at_once_get_the_same_ca(world: World) -> None:
    """The request that loses the race to sign a job's CA answers with the winner's."""
    job, _, b = _two_hosts(world)
    stale = RuntimeCA.objects.get(job=job)  # read before the other request signed it
    (task, *_) = (t for t in desired_tasks(b).tasks if t.job_id == job.pk)
    assert task.tls is not None
    late = _signed(stale, timezone.now())
    assert late.cert == task.tls.ca == RuntimeCA.objects.get(job=job).cert
    assert unseal(late.sealed_key) == unseal(RuntimeCA.objects.get(job=job).sealed_key)


def test_a_worker_added_on_a_new_node_gets_that_nodes_certificate(world: World) -> None:
    job, _, _ = _two_hosts(world)
    c, _ = make_node("node-c", address="gpu-3.example.net")
    worker = Placement(TaskRole.WORKER, 1, c.pk, 41010, 0.5, 512)
    rescale_workers(job=job, add=[worker], stop=[], now=timezone.now())
    (added,) = desired_tasks(c).tasks
    assert added.tls is not None
    assert _san(x509.load_pem_x509_certificate(added.tls.cert.encode())) == ["gpu-3.example.net"]


def test_loopback_jobs_stay_plaintext_unless_tls_is_on(world: World, settings: Any) -> None:
    job = make_job(world.alice)  # world.node is 127.0.0.1
    place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    assert not RuntimeCA.objects.filter(job=job).exists()
    assert all(t.tls is None for t in desired_tasks(world.node).tasks)

    settings.RUNTIME_TLS = "on"
    forced = make_job(world.alice, name="forced")
    place_job(job=forced, placements=gang_placements(forced, world.node), now=timezone.now())
    assert all(t.tls is not None for t in desired_tasks(world.node).tasks if t.job_id == forced.pk)


def test_an_operator_can_opt_out(world: World, settings: Any) -> None:
    settings.RUNTIME_TLS = "off"
    job, a, b = _two_hosts(world)
    assert not RuntimeCA.objects.filter(job=job).exists()
    assert all(t.tls is None for t in (*desired_tasks(a).tasks, *desired_tasks(b).tasks))


def test_the_agent_api_carries_the_material_and_the_user_api_never_does(
    world: World,
) -> None:
    a, credential = make_node("node-a", address="10.1.0.1")
    job = make_job(world.alice)
    place_job(job=job, placements=gang_placements(job, a), now=timezone.now())

    agent = APIClient().get(DESIRED_TASKS_PATH, HTTP_AUTHORIZATION=f"Node {credential}")
    assert agent.status_code == 200
    parsed = parse_desired_tasks(agent.json())
    assert all(t.tls is not None and "PRIVATE KEY" in t.tls.key for t in parsed.tasks)

    user = APIClient()
    user.force_authenticate(world.alice)
    for path in (f"/api/v1/jobs/{job.pk}/", "/api/v1/jobs/", f"/api/v1/jobs/{job.pk}/events/"):
        answer = user.get(path)
        assert answer.status_code == 200, path
        text = json.dumps(answer.json())
        assert "BEGIN" not in text and "sealed" not in text, path
