"""A TrainHub cluster on one machine, as production runs it (issue 31): private PostgreSQL
and Redis, the shipped `deploy/nginx.conf` (TLS, a certificate of the run's own) in front
of two `trainhub web` processes, two Celery workers, beat, and three agents, each a
"host" of its own on 127.0.0.2-4 (its own prefix, work directory, name, task uids and
checkpoint storage: see Host), installed by the one-line installer against nginx's
https URL. The server processes run with the settings an operator sets:
`TRAINHUB_ENV=production`, one trusted proxy, the external URL.

`production_cluster()` is the test fixture's context manager; `python -m tests.cluster`
(`make cluster`) starts one for people and keeps it until Ctrl-C.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from trainhub.standalone.processes import (
    ProcessGroup,
    beat_command,
    child_env,
    worker_command,
)

from tests.e2e.cluster import ADMIN, data_paths, sandbox_base, setup_database, task_port_range
from tests.instances import Postgres, Redis, free_port

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass
class Host:
    """One agent's machine: where it is installed, its own disk for checkpoints, its own
    task uids, and the process that runs it.

    Hosts on one machine share its process table, so each gets a uid range of its own;
    and a job's uid differs between them, so each keeps its checkpoints on storage of its
    own (bound at the checkpoint root in the agent's own mount namespace), as separate
    machines without a shared file system do."""

    name: str
    address: str
    prefix: Path
    uids: str
    checkpoints: Path
    agent: subprocess.Popen[bytes] | None = None


@dataclass
class Cluster:
    url: str  # nginx, the only address users and agents are given
    webs: dict[str, str]  # web process name -> its own http URL (behind nginx)
    group: ProcessGroup
    tmp: Path
    ca_bundle: Path  # the system's CAs and this cluster's certificate
    database: Postgres
    commands: dict[str, list[str]]  # each server process's command, by name
    hosts: list[Host] = field(default_factory=list)
    api: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.api = client(self.url, self.ca_bundle)

    def stop(self, name: str, *, kill: bool = False) -> None:
        """Stop one server process: SIGTERM (it finishes what it serves), or SIGKILL."""
        proc = self.group.procs[name]
        if kill:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        else:
            self.group.stop(names=[name])

    def start(self, name: str) -> None:
        """Start a stopped server process again; a web process answers before this returns."""
        proc = self.group.start(name, self.commands[name])
        if name in self.webs:
            _wait(f"{self.webs[name]}/readyz", False, lambda: [proc.poll()] != [None])

    def node_env(self) -> dict[str, str]:
        """A shell on a node: nothing of this checkout, and the cluster's CA trusted (as
        an operator with a private CA installs it into the node's store)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        ours = str(Path(sys.prefix) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != ours)
        trust = str(self.ca_bundle)
        env.update(PYTHONNOUSERSITE="1", SSL_CERT_FILE=trust, CURL_CA_BUNDLE=trust, PIP_CERT=trust)
        return env

    def install(self, host: Host, token: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the install one-liner as shown for an enrollment token (or, with no token,
        again on an enrolled host: the upgrade)."""
        script = f"curl -fsSL {self.url}/agent/install.sh | sh -s -- --server {self.url}"
        options = (
            f" --prefix {host.prefix} --name {host.name} --address {host.address}"
            f" --labels host={host.name} --no-service"
        )
        env = self.node_env()
        if token is not None:
            token_file = self.tmp / f"{host.name}.token"
            token_file.write_text(token + "\n")
            token_file.chmod(0o600)
            options += f" --token-file {token_file}"
        return subprocess.run(
            ["sh", "-c", script + options],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def start_agent(self, host: Host) -> None:
        env = {**self.node_env(), "HOME": str(host.prefix)}
        env.update(TRAINHUB_TASK_DATA_PATHS=data_paths(), TRAINHUB_TASK_UID_RANGE=host.uids)
        log = (self.tmp / "logs" / f"agent-{host.name}.log").open("ab")
        root = self.group.env["TRAINHUB_CHECKPOINT_ROOT"]
        own_disk = 'mount --bind "$0" "$1" && exec "$2" run'
        host.agent = subprocess.Popen(
            [
                *("unshare", "--mount", "--propagation", "private", "sh", "-c", own_disk),
                *(str(host.checkpoints), root, str(host.prefix / "bin" / "trainhub-agent")),
            ],
            env=env,
            cwd=host.prefix,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop_agent(self, host: Host) -> None:
        if host.agent is not None and host.agent.poll() is None:
            host.agent.terminate()
            host.agent.wait(30)
        host.agent = None

    def nodes(self) -> dict[str, dict[str, Any]]:
        results = self.api.get("/api/v1/nodes/").raise_for_status().json()["results"]
        return {n["hostname"]: n for n in results}


def client(url: str, ca_bundle: Path) -> httpx.Client:
    """An API client signed in as the cluster's admin (token auth, through nginx)."""
    http = httpx.Client(base_url=url, verify=trusting(ca_bundle), timeout=30)
    token = http.post(
        "/api/v1/auth/token/", json={"username": ADMIN[0], "password": ADMIN[1]}
    ).raise_for_status()
    http.headers["Authorization"] = f"Token {token.json()['token']}"
    return http


def web_process(port: int) -> list[str]:
    """`trainhub web`, as an operator starts each web process."""
    return [sys.executable, "-m", "trainhub.cli", "web", "--host", "127.0.0.1", "--port", str(port)]


def trusting(ca_bundle: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_bundle))


def certificate(tmp: Path) -> tuple[Path, Path, Path]:
    """A self-signed certificate for 127.0.0.1, and a CA bundle that trusts it."""
    crt, key = tmp / "trainhub.crt", tmp / "trainhub.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-keyout", str(key), "-out", str(crt), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    bundle = tmp / "ca-bundle.crt"
    bundle.write_bytes(SYSTEM_CA.read_bytes() + b"\n" + crt.read_bytes())
    return crt, key, bundle


def nginx_config(tmp: Path, port: int, webs: list[int], crt: Path, key: Path) -> Path:
    """The shipped server block with this run's port, certificate and web processes."""
    shipped = (REPO / "deploy" / "nginx.conf").read_text()
    servers = "".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=5s;\n" for p in webs)
    replaced = {
        "    server 127.0.0.1:8000 max_fails=1 fail_timeout=5s;\n": servers,
        "listen 443 ssl;": f"listen 127.0.0.1:{port} ssl;",
        "server_name trainhub.example.com;": "server_name 127.0.0.1;",
        "/etc/ssl/trainhub.crt": str(crt),
        "/etc/ssl/trainhub.key": str(key),
    }
    for old, new in replaced.items():
        assert shipped.count(old) == 1, f"deploy/nginx.conf no longer has {old!r}"
        shipped = shipped.replace(old, new)
    (tmp / "nginx").mkdir()
    conf = tmp / "nginx" / "nginx.conf"
    conf.write_text(
        # Each agent holds two connections (its own and the one to its web process).
        f"daemon off;\nworker_processes 1;\nworker_rlimit_nofile 16384;\n"
        f"pid {tmp}/nginx/nginx.pid;\nerror_log {tmp}/logs/nginx-error.log warn;\n"
        "events { worker_connections 8192; }\n"
        # Which web process answered each request (the tests read it).
        "http {\n  log_format upstreams '$remote_addr \"$request\" $status $upstream_addr';\n"
        f"  access_log {tmp}/logs/nginx-access.log upstreams;\n"
        f"  client_body_temp_path {tmp}/nginx/body;\n  proxy_temp_path {tmp}/nginx/proxy;\n"
        f"{shipped}\n}}\n"
    )
    return conf


def _wait(url: str, bundle: Path | bool, exited: Callable[[], object], timeout: float = 60) -> None:
    """Until `url` answers 2xx; fails once `exited()` is truthy (a process died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert not exited(), f"a server process exited during start-up: {exited()}"
        try:
            verify = bundle if isinstance(bundle, bool) else trusting(bundle)
            if httpx.get(url, verify=verify).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout:.0f} s")


@contextmanager
def production_cluster(tmp: Path, agents: int = 3) -> Iterator[Cluster]:
    if shutil.which("nginx") is None:
        raise RuntimeError("nginx is not installed (Debian: apt-get install nginx-light)")
    (tmp / "logs").mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        database, broker = Postgres(), Redis()
        stack.callback(database.remove)
        database.start()
        database_url = database.create_database()
        stack.callback(broker.stop)
        broker.start()
        port, web_ports = free_port(), [free_port(), free_port()]
        url = f"https://127.0.0.1:{port}"
        base = sandbox_base("trainhub-cluster-")
        stack.callback(shutil.rmtree, base, True)
        env = child_env(
            {
                "DATABASE_URL": database_url,
                "REDIS_URL": broker.url,
                "TRAINHUB_ENV": "production",
                "TRAINHUB_SECRET_KEY": secrets.token_urlsafe(48),
                "TRAINHUB_ALLOWED_HOSTS": "127.0.0.1",
                "TRAINHUB_CSRF_TRUSTED_ORIGINS": url,
                "TRAINHUB_EXTERNAL_URL": url,
                "TRAINHUB_TRUSTED_PROXIES": "1",
                "TRAINHUB_DATA_DIR": str(tmp / "data"),
                # Where each host's own checkpoint storage is mounted (see Host).
                "TRAINHUB_CHECKPOINT_ROOT": str(base / "checkpoints"),
                **task_port_range(),
                "DJANGO_SUPERUSER_PASSWORD": ADMIN[1],
            }
        )
        setup_database(env, team_cpu=6)
        crt, key, bundle = certificate(tmp)
        group = ProcessGroup(env=env, log_dir=tmp / "logs")
        stack.callback(group.stop)
        webs = {f"web{i}": f"http://127.0.0.1:{p}" for i, p in enumerate(web_ports, 1)}
        commands = {f"web{i}": web_process(p) for i, p in enumerate(web_ports, 1)}
        for i in (1, 2):
            commands[f"worker{i}"] = [*worker_command(), "--hostname", f"worker{i}@%h"]
        commands["beat"] = beat_command(tmp / "celerybeat-schedule")
        conf = nginx_config(tmp, port, web_ports, crt, key)
        commands["nginx"] = ["nginx", "-p", str(tmp / "nginx"), "-c", str(conf)]
        for name, command in commands.items():
            group.start(name, command)
        for web in webs.values():
            _wait(f"{web}/readyz", False, group.exited)
        _wait(f"{url}/readyz", bundle, group.exited)
        cluster = Cluster(url, webs, group, tmp, bundle, database, commands)
        for n, address in enumerate(HOSTS[:agents], 1):
            first = 300_000 + 1000 * n
            host = Host(
                f"host-{n}",
                address,
                base / f"host-{n}",
                uids=f"{first}-{first + 999}",
                checkpoints=base / f"host-{n}-checkpoints",
            )
            host.checkpoints.mkdir(mode=0o711)
            (base / "checkpoints").mkdir(mode=0o711, exist_ok=True)
            stack.callback(cluster.stop_agent, host)
            issued = cluster.api.post("/api/v1/enrollment-tokens/", json={})
            installed = cluster.install(host, issued.raise_for_status().json()["token"])
            assert installed.returncode == 0, installed.stdout + installed.stderr
            cluster.start_agent(host)
            cluster.hosts.append(host)
        _wait_hosts_ready(cluster)
        yield cluster


def _wait_hosts_ready(cluster: Cluster, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    names = {h.name for h in cluster.hosts}
    while time.monotonic() < deadline:
        nodes = cluster.nodes()
        if all(n in nodes and nodes[n]["alive"] and nodes[n]["usage"] for n in names):
            return
        for host in cluster.hosts:
            assert host.agent is not None and host.agent.poll() is None, (
                f"{host.name}'s agent exited"
            )
        time.sleep(0.5)
    raise AssertionError(f"the hosts never became ready: {cluster.nodes()}")
