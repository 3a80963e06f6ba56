"""Optional TLS from cert files (TRAINHUB_TLS_CERT / _KEY / _CA)."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import trustme

from ps_runtime.cluster import LocalCluster
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.strategy import ParameterServerStrategy


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
