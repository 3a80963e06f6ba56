"""Node facts for enrollment and usage sampling for heartbeats (Linux /proc, no psutil)."""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ps_runtime.agent.gpus import GpuInfo, GpuUsage, query_gpu_usage, query_gpus
from ps_runtime.agent.messages import USAGE_CPUS, USAGE_MEMORY_TOTAL_MB
from ps_runtime.version import known_runtime_version

PROC = Path("/proc")
TCP_LISTEN = "0A"  # the `st` column of /proc/net/tcp for a listening socket
# Task ports are never privileged; the bound keeps a heartbeat small on a busy host.
MIN_REPORTED_PORT = 1024
MAX_REPORTED_PORTS = 1024


@dataclass(frozen=True)
class NodeFacts:
    hostname: str
    address: str
    cpus: int
    memory_mb: int
    gpus: list[GpuInfo] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    agent_version: str | None = None  # the trainhub-runtime this agent runs

    def as_enroll_body(self, token: str) -> dict[str, object]:
        body: dict[str, object] = {
            "token": token,
            "hostname": self.hostname,
            "address": self.address,
            "cpus": self.cpus,
            "memory_mb": self.memory_mb,
            "gpus": list(self.gpus),
            "labels": dict(self.labels),
        }
        if self.agent_version is not None:
            body["agent_version"] = self.agent_version
        return body


def node_cpus() -> list[int]:
    """CPU ids this agent (and therefore its tasks) may run on, sorted."""
    return sorted(os.sched_getaffinity(0))


def read_meminfo(proc: Path = PROC) -> dict[str, int]:
    """`/proc/meminfo` as {field: kB}."""
    info: dict[str, int] = {}
    for line in (proc / "meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            info[name.strip()] = int(parts[0])
    return info


def memory_total_mb(proc: Path = PROC) -> int:
    return read_meminfo(proc).get("MemTotal", 0) // 1024


def node_totals(proc: Path = PROC) -> dict[str, int]:
    """The CPUs this agent may use and the node's memory (MiB), as the heartbeat's
    `cpus` and `memory_total_mb`: measured as enrollment measures them (`gather_facts`),
    so the server can tell a node that declared more than it has. A total that reads as
    0 (no `MemTotal`) is left out rather than sent, since the server refuses it."""
    totals = {USAGE_CPUS: len(node_cpus()), USAGE_MEMORY_TOTAL_MB: memory_total_mb(proc)}
    return {name: value for name, value in totals.items() if value > 0}


def memory_used_mb(proc: Path = PROC) -> int:
    info = read_meminfo(proc)
    total = info.get("MemTotal", 0)
    available = info.get("MemAvailable", info.get("MemFree", 0))
    return max(0, total - available) // 1024


def listening_ports(proc: Path = PROC) -> list[int]:
    """TCP ports (>= 1024) some process on the node listens on, IPv4 and IPv6, sorted;
    at most `MAX_REPORTED_PORTS` of them (the lowest)."""
    ports: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / name).read_text().splitlines()[1:]
        except OSError:  # no IPv6, or /proc/net hidden
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != TCP_LISTEN:
                continue
            _, _, port = fields[1].rpartition(":")
            try:
                number = int(port, 16)
            except ValueError:
                continue
            if number >= MIN_REPORTED_PORT:
                ports.add(number)
    return sorted(ports)[:MAX_REPORTED_PORTS]


def guess_address(server_url: str | None = None) -> str:
    """The local address used to reach the server (no packet is sent), else the hostname's."""
    host, port = "192.0.2.1", 80  # TEST-NET-1: any routable address picks the default route
    if server_url:
        parts = urlsplit(server_url)
        host = parts.hostname or host
        port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0][0]
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((host, port))
            return str(sock.getsockname()[0])
    except OSError:
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def gather_facts(
    server_url: str | None = None,
    address: str | None = None,
    *,
    name: str | None = None,
    labels: dict[str, str] | None = None,
) -> NodeFacts:
    """This node's facts; `name` replaces the hostname as the node's name."""
    return NodeFacts(
        hostname=name or socket.gethostname(),
        address=address or guess_address(server_url),
        cpus=len(node_cpus()),
        memory_mb=memory_total_mb(),
        gpus=query_gpus(),
        labels=dict(labels or {}),
        agent_version=known_runtime_version(),
    )


def _read_cpu_times(proc: Path) -> tuple[int, int]:
    """(busy, total) jiffies from the aggregate `cpu` line of /proc/stat."""
    with (proc / "stat").open() as f:
        fields = f.readline().split()
    # user nice system idle iowait irq softirq steal [guest guest_nice]; guest time is
    # already counted in user/nice, so only the first eight add up to the total.
    values = [int(v) for v in fields[1:9]]
    total = sum(values)
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return total - idle, total


class UsageSampler:
    """CPU percent since the previous sample (all node CPUs), memory in use, the node's
    totals (`node_totals`), each GPU's utilization and memory in use, and the TCP ports
    in use on the node."""

    def __init__(self, proc: Path = PROC) -> None:
        self._proc = proc
        self._lock = threading.Lock()
        self._last = _read_cpu_times(proc)

    def cpu_percent(self) -> float:
        with self._lock:
            busy, total = _read_cpu_times(self._proc)
            last_busy, last_total = self._last
            self._last = (busy, total)
        delta_total = total - last_total
        if delta_total <= 0:
            return 0.0
        return round(100.0 * max(0, busy - last_busy) / delta_total, 1)

    def sample(self) -> dict[str, float]:
        return {
            "cpu_percent": self.cpu_percent(),
            "memory_used_mb": memory_used_mb(self._proc),
            **node_totals(self._proc),
        }

    def gpus(self) -> list[GpuUsage]:
        return query_gpu_usage()

    def ports_in_use(self) -> list[int]:
        return listening_ports(self._proc)
