"""What a node's agent measures: the TCP ports in use, read from /proc/net/tcp and tcp6,
and the node's totals its heartbeats carry, measured as at enrollment."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from ps_runtime.agent.facts import (
    MAX_REPORTED_PORTS,
    UsageSampler,
    gather_facts,
    listening_ports,
    node_totals,
)

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


def _fake_proc(tmp_path: Path, meminfo: str) -> Path:
    (tmp_path / "stat").write_text("cpu  100 0 50 800 10 0 0 0 0 0\n")
    (tmp_path / "meminfo").write_text(meminfo)
    return tmp_path


def test_the_usage_carries_the_totals_enrollment_declares(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, "MemTotal:       16384000 kB\nMemAvailable:    8192000 kB\n")
    usage = UsageSampler(proc).sample()
    assert usage["cpus"] == len(os.sched_getaffinity(0))
    assert usage["memory_total_mb"] == 16000
    assert usage["memory_used_mb"] == 8000
    # On the real node, the heartbeat's totals are what enrollment declared.
    facts = gather_facts(address="127.0.0.1")
    assert node_totals() == {"cpus": facts.cpus, "memory_total_mb": facts.memory_mb}


def test_a_total_that_cannot_be_read_is_left_out(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, "MemFree: 1024 kB\n")
    assert node_totals(proc) == {"cpus": len(os.sched_getaffinity(0))}
    assert "memory_total_mb" not in UsageSampler(proc).sample()
