"""The agent's code cache: fetched as the job, verified, cached by digest, unpacked
read-only per task, refused when unsafe; the supervisor hands the directory to the task."""

from __future__ import annotations

import hashlib
import re
import stat
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ps_runtime import taskenv
from ps_runtime.agent.codecache import CodeCache, CodeError
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import DesiredTask, ReportedState
from ps_runtime.agent.supervisor import Supervisor

from ...archive_builders import MYMODEL, tar_gz, traversal_tar
from .helpers import log_lines, statuses, wait_for

TOKEN = "job-token-12"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class FakeServer:
    """Serves `archives[digest]` to `Authorization: Job 12:<TOKEN>`; counts requests."""

    url: str = ""
    archives: dict[str, bytes] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.requests.append(self.path)
            fake.auth.append(self.headers.get("Authorization", ""))
            digest = self.path.removeprefix("/api/v1/code/").rstrip("/")
            body = fake.archives.get(digest)
            if self.headers.get("Authorization") != f"Job 12:{TOKEN}":
                self.send_response(401)
                body = b""
            elif body is None:
                self.send_response(404)
                body = b""
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield fake
    httpd.shutdown()
    httpd.server_close()


def task_with_code(digest: str | None, token: str = TOKEN, attempt: int = 1) -> DesiredTask:
    env = {taskenv.ROLE.name: "worker", taskenv.JOB_TOKEN.name: token}
    if digest is not None:
        env[taskenv.CODE.name] = digest
    return DesiredTask(id=7, attempt=attempt, job_id=12, role=taskenv.Role.WORKER, index=0, env=env)


def test_fetch_verify_cache_and_unpack_read_only(server: FakeServer, tmp_path: Path) -> None:
    data = tar_gz({"mymodel.py": MYMODEL, "pkg/__init__.py": b""})
    digest = digest_of(data)
    server.archives[digest] = data
    cache = CodeCache(server.url, tmp_path / "cache")
    first = cache.prepare(task_with_code(digest), tmp_path / "t1")
    assert first == str(tmp_path / "t1" / "code")
    assert (Path(first) / "mymodel.py").read_bytes() == MYMODEL
    assert stat.S_IMODE((Path(first) / "mymodel.py").stat().st_mode) == 0o444
    assert stat.S_IMODE((Path(first) / "pkg").stat().st_mode) == 0o555
    assert server.auth == [f"Job 12:{TOKEN}"]
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    # A second task of the job unpacks the cached copy: no second download.
    second = cache.prepare(task_with_code(digest, attempt=2), tmp_path / "t2")
    assert second is not None and (Path(second) / "mymodel.py").exists()
    assert len(server.requests) == 1
    # Preparing the same attempt again replaces its read-only copy.
    assert cache.prepare(task_with_code(digest), tmp_path / "t1") == first


def test_a_corrupt_cache_entry_is_fetched_again(server: FakeServer, tmp_path: Path) -> None:
    data = tar_gz({"mymodel.py": MYMODEL})
    digest = digest_of(data)
    server.archives[digest] = data
    cache = CodeCache(server.url, tmp_path / "cache")
    path = cache.archive(task_with_code(digest))
    assert path is not None
    path.write_bytes(b"garbage")  # a new size and mtime: hashed again
    assert cache.archive(task_with_code(digest)) == path
    assert path.read_bytes() == data
    assert len(server.requests) == 2


def test_failures_are_code_errors_and_leave_no_cache_entry(
    server: FakeServer, tmp_path: Path
) -> None:
    cache = CodeCache(server.url, tmp_path / "cache")
    good = tar_gz({"a.py": b""})
    wrong = digest_of(b"something else")
    server.archives[wrong] = good  # the server sends bytes that do not match the digest
    with pytest.raises(CodeError, match="digest"):
        cache.archive(task_with_code(wrong))
    with pytest.raises(CodeError, match="HTTP 404"):
        cache.archive(task_with_code("sha256:" + "1" * 64))
    server.archives[digest_of(good)] = good
    with pytest.raises(CodeError, match="HTTP 401"):
        cache.archive(task_with_code(digest_of(good), token="not-the-token"))
    evil = traversal_tar()
    server.archives[digest_of(evil)] = evil
    with pytest.raises(CodeError, match=re.escape("refused: '../evil.py' contains '..'")):
        cache.prepare(task_with_code(digest_of(evil)), tmp_path / "t")
    assert not (tmp_path / "t" / "code").exists()
    assert not (tmp_path / "evil.py").exists()
    unreachable = CodeCache("http://127.0.0.1:9", tmp_path / "cache2", timeout=2)
    with pytest.raises(CodeError, match="cannot fetch"):
        unreachable.archive(task_with_code(digest_of(good)))
    leftovers = [p.name for p in (tmp_path / "cache").iterdir()]
    assert leftovers == [digest_of(evil).removeprefix("sha256:")]


def test_a_task_without_code_needs_nothing(tmp_path: Path) -> None:
    cache = CodeCache("http://127.0.0.1:9", tmp_path / "cache")
    assert cache.prepare(task_with_code(None), tmp_path / "t") is None
    assert not (tmp_path / "cache").exists()


IMPORT_USER_CODE = (
    sys.executable,
    "-c",
    "import os, sys; sys.path.insert(0, os.environ['TRAINHUB_CODE_DIR']); "
    "import mymodel; print('user code from', mymodel.__file__)",
)


def test_the_supervisor_unpacks_the_code_before_the_task_starts(
    server: FakeServer, tmp_path: Path
) -> None:
    data = tar_gz({"mymodel.py": MYMODEL})
    digest = digest_of(data)
    server.archives[digest] = data
    outbox = Outbox()
    cache = CodeCache(server.url, tmp_path / "cache")
    supervisor = Supervisor(outbox, tmp_path, command=IMPORT_USER_CODE, code=cache)
    messages: list[dict[str, object]] = []

    def finished(key: tuple[int, int]) -> bool:
        messages.extend(m.to_wire() for m in outbox.drain())
        return any(s[:2] == key and s[2] != "running" for s in statuses(messages))

    supervisor.start(task_with_code(digest))
    wait_for(lambda: finished((7, 1)), 15, "the task's exit")
    assert (7, 1, ReportedState.SUCCEEDED.value) in statuses(messages)
    code_dir = tmp_path / "tasks" / "7-1" / "code"
    assert log_lines(messages, "stdout") == [f"user code from {code_dir / 'mymodel.py'}"]

    # A job whose archive cannot be fetched: the task fails to start, saying why.
    supervisor.start(task_with_code("sha256:" + "2" * 64, attempt=2))
    wait_for(lambda: finished((7, 2)), 15, "the failed start")
    failed = [m for m in messages if m.get("state") == "failed"]
    assert "HTTP 404" in str(failed[0]["message"])


def test_a_task_told_of_code_that_was_not_unpacked_says_so() -> None:
    env = {
        taskenv.ROLE.name: "worker",
        taskenv.JOB_TOKEN.name: TOKEN,
        taskenv.BIND.name: "127.0.0.1:1",
        taskenv.CODE.name: "sha256:" + "3" * 64,
    }
    with pytest.raises(taskenv.TaskEnvError, match="TRAINHUB_CODE_DIR is not"):
        taskenv.TaskEnvironment.from_env(env)
    parsed = taskenv.TaskEnvironment.from_env({**env, taskenv.CODE_DIR.name: "/x/code"})
    assert (parsed.code, parsed.code_dir) == ("sha256:" + "3" * 64, "/x/code")
    with pytest.raises(taskenv.TaskEnvError, match="TRAINHUB_CODE='md5:1'"):
        taskenv.TaskEnvironment.from_env({**env, taskenv.CODE.name: "md5:1"})
