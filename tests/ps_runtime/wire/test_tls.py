"""TLS from cert files (TRAINHUB_TLS_CERT / _KEY / _CA): an operator's own, or the ones
the platform issues for a job whose tasks run on several hosts (`trainhub.jobs.pki`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import grpc
import numpy as np
import pytest
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc
from trainhub.jobs import pki

from ps_runtime.coordinator.cluster import ClusterResolver, LocalCluster
from ps_runtime.coordinator.cluster_coordinator import ClusterCoordinator
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.coordinator.worker_server import create_worker_server
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.server.servicer import create_ps_server
from ps_runtime.wire import rpc
from tests.ps_runtime import closure_fns


def _certificates(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A test CA and a server certificate it signed for 127.0.0.1 and localhost."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    cert, key, ca_cert = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    server.cert_chain_pems[0].write_to_path(str(cert))
    server.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_cert))
    return cert, key, ca_cert


def test_tls_cluster_serves_over_tls_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key, ca = _certificates(tmp_path)
    monkeypatch.setenv("TRAINHUB_TLS_CERT", str(cert))
    monkeypatch.setenv("TRAINHUB_TLS_KEY", str(key))
    monkeypatch.setenv("TRAINHUB_TLS_CA", str(ca))
    with LocalCluster(num_ps=1) as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        t = strategy.create_table("t", 2, initializer="zeros")
        t.push_gradients(np.array([1]), np.ones((1, 2)))
        np.testing.assert_allclose(t.lookup(np.array([1])), [[-0.01, -0.01]])
        with grpc.insecure_channel(cluster.resolver.ps[0]) as plain:
            with pytest.raises(grpc.RpcError) as info:
                ps_pb2_grpc.ParameterServerStub(plain).Stats(ps_pb2.StatsRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        strategy.close()


# -- with the material the platform issues for a job across hosts --------------------

TOKEN = "job-7-token"


def _write(directory: Path, issued: pki.Issued, ca: pki.Issued) -> rpc.TLSFiles:
    """What the agent writes for a task: its node's certificate and key, the job's CA."""
    directory.mkdir()
    paths = {}
    for name, text in (("cert", issued.cert), ("key", issued.key), ("ca", ca.cert)):
        paths[name] = directory / f"tls-{name}.pem"
        paths[name].write_text(text)
    return rpc.TLSFiles(str(paths["cert"]), str(paths["key"]), str(paths["ca"]))


def _health(address: str, token: str, tls: rpc.TLSFiles | None) -> grpc.StatusCode:
    """The status of one health check over TLS trusting `tls.ca` (None: plaintext)."""
    if tls is None:
        channel = grpc.insecure_channel(address)
    else:
        channel = rpc.create_channel(address, tls)
    with channel:
        try:
            health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), metadata=rpc.auth_metadata(token), timeout=5
            )
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


@pytest.fixture
def job_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str, str]]:
    """A job the platform gave TLS: its PS on one "host" (127.0.0.1) and its worker on
    another ("localhost"), each with that node's certificate from the job's CA; the
    coordinator (this process) and the worker trust the CA through TRAINHUB_TLS_CA."""
    now = datetime.now(UTC)
    assert pki.tls_wanted("auto", ["10.0.0.1", "10.0.0.2"])  # what the platform decides
    ca = pki.issue_ca(7, now)
    ps_tls = _write(tmp_path / "ps", pki.issue_leaf(ca, "127.0.0.1", now), ca)
    worker_tls = _write(tmp_path / "worker", pki.issue_leaf(ca, "localhost", now), ca)
    monkeypatch.setenv("TRAINHUB_TLS_CA", ps_tls.ca)
    ps, ps_port = create_ps_server("127.0.0.1:0", token=TOKEN, tls=ps_tls)
    worker, worker_port = create_worker_server("localhost:0", token=TOKEN, tls=worker_tls)
    yield f"127.0.0.1:{ps_port}", f"localhost:{worker_port}", ps_tls.ca
    worker.stop(None)
    ps.stop(None)


def test_a_job_trains_over_tls_with_its_own_ca(
    job_cluster: tuple[str, str, str],
) -> None:
    ps, worker, _ = job_cluster
    strategy = ParameterServerStrategy(ClusterResolver([ps], [worker], TOKEN))
    table = strategy.create_table("t", 2, initializer="zeros")
    with ClusterCoordinator(strategy) as coordinator:
        # The worker pushes to the PS itself: worker -> PS is TLS too.
        pushed = coordinator.schedule(closure_fns.push_rows, (table, [1], np.ones((1, 2))))
        coordinator.join()
        pushed.fetch()
    np.testing.assert_allclose(table.lookup(np.array([1])), [[-0.01, -0.01]])
    strategy.close()


def test_plaintext_another_ca_or_a_wrong_token_is_refused(
    job_cluster: tuple[str, str, str], tmp_path: Path
) -> None:
    ps, worker, ca = job_cluster
    trusted = rpc.TLSFiles(ca=ca)
    other = tmp_path / "other-ca.pem"
    other.write_text(pki.issue_ca(8, datetime.now(UTC)).cert)
    for address in (ps, worker):
        assert _health(address, TOKEN, trusted) == grpc.StatusCode.OK
        # A call without TLS never reaches the service.
        assert _health(address, TOKEN, None) == grpc.StatusCode.UNAVAILABLE
        # Nor one that trusts another job's CA (another job's tasks, an impostor).
        assert _health(address, TOKEN, rpc.TLSFiles(ca=str(other))) == grpc.StatusCode.UNAVAILABLE
        # TLS does not replace the job token.
        assert _health(address, "wrong", trusted) == grpc.StatusCode.UNAUTHENTICATED


def test_a_certificate_for_another_host_is_refused(tmp_path: Path) -> None:
    """A server presenting the job's certificate of another node (SAN mismatch)."""
    now = datetime.now(UTC)
    ca = pki.issue_ca(7, now)
    elsewhere = _write(tmp_path / "ps", pki.issue_leaf(ca, "10.9.9.9", now), ca)
    server, port = create_ps_server("127.0.0.1:0", token=TOKEN, tls=elsewhere)
    try:
        trusted = rpc.TLSFiles(ca=elsewhere.ca)
        assert _health(f"127.0.0.1:{port}", TOKEN, trusted) == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(None)
