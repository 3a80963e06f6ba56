"""The TCP ports a node's agent reports in use, read from /proc/net/tcp and tcp6."""

from __future__ import annotations

import socket
from pathlib import Path

from ps_runtime.agent.facts import MAX_REPORTED_PORTS, UsageSampler, listening_ports

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"


def _line(local: str, state: str) -> str:
    return f"   0: {local} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000  0\n"


def test_only_listening_ports_at_or_above_1024(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(
        HEADER
        + _line("0100007F:5DC0", "0A")  # 127.0.0.1:24000, listening
        + _line("00000000:0016", "0A")  # :22, privileged
        + _line("0100007F:5DC1", "01")  # 24001, established: not listening
        + "garbage\n"
    )
    (tmp_path / "net" / "tcp6").write_text(
        HEADER + _line("00000000000000000000000000000000:5DC2", "0A")  # [::]:24002
    )
    assert listening_ports(tmp_path) == [24000, 24002]


def test_missing_tables_mean_no_ports(tmp_path: Path) -> None:
    assert listening_ports(tmp_path) == []


def test_the_list_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    lines = [_line(f"0100007F:{port:04X}", "0A") for port in range(2000, 2000 + 2000)]
    (tmp_path / "net" / "tcp").write_text(HEADER + "".join(lines))
    ports = listening_ports(tmp_path)
    assert len(ports) == MAX_REPORTED_PORTS and ports[0] == 2000


def test_a_real_listening_socket_is_seen() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert port not in UsageSampler().ports_in_use()
        sock.listen()
        assert port in UsageSampler().ports_in_use()
