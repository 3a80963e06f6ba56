"""Optional TLS from cert files (TRAINHUB_TLS_CERT / _KEY / _CA)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import grpc
import numpy as np
import pytest

from ps_runtime.cluster import LocalCluster
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.strategy import ParameterServerStrategy

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_tls_cluster_serves_over_tls_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _self_signed(tmp_path)
    monkeypatch.setenv("TRAINHUB_TLS_CERT", str(cert))
    monkeypatch.setenv("TRAINHUB_TLS_KEY", str(key))
    monkeypatch.setenv("TRAINHUB_TLS_CA", str(cert))
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
