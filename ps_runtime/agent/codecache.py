"""Users' code on the node: fetch a job's archive, cache it by digest, unpack it per task.

A desired task whose env names `TRAINHUB_CODE` (a `sha256:<hex>` digest) gets the
archive from `GET /api/v1/code/<digest>/`, authenticated as its job
(`Authorization: Job <job id>:<job token>`; the server serves a job only its own
archive). The archive is kept under `<work dir>/code/<hex>` (0700 directory) and its
sha256 checked on every use: a corrupt entry is fetched again. Each task attempt gets
its own read-only copy in `<task dir>/code` (`ps_runtime.archives.extract`, the same
checks as the server's), named by `TRAINHUB_CODE_DIR`; `python -m ps_runtime.task` puts
it first on `sys.path`.
"""

from __future__ import annotations

import io
import logging
import os
import secrets
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path

from ps_runtime import archives, taskenv
from ps_runtime.agent import protocol, rest
from ps_runtime.agent.protocol import DesiredTask

logger = logging.getLogger(__name__)

CODE_PATH = "/api/v1/code/{digest}/"
# The server refuses archives over TRAINHUB_CODE_MAX_MB (default 100) that expand past 10x
# that; the agent's own bounds only keep a broken server from filling the disk.
MAX_ARCHIVE_BYTES = 4 * 1024**3
MAX_UNPACKED_BYTES = 40 * 1024**3


class CodeError(OSError):
    """The job's code could not be fetched or unpacked; the message says why."""


class CodeCache:
    """Archives by digest under `cache_dir`, fetched from `server` on first use."""

    def __init__(self, server: str, cache_dir: Path, *, timeout: float = 60.0) -> None:
        self._server = server
        self._dir = cache_dir
        self._timeout = timeout
        self._lock = threading.Lock()  # guards _locks
        self._locks: dict[str, threading.Lock] = {}  # one fetch per digest at a time
        # Digest -> (inode, size, mtime) of the cached file when its sha256 last matched.
        self._verified: dict[str, tuple[int, int, int]] = {}

    def archive(self, task: DesiredTask) -> Path | None:
        """The verified archive of the task's job (fetched if needed); None: no code."""
        digest = taskenv.CODE.read(task.env)
        if digest is None:
            return None
        with self._lock:
            lock = self._locks.setdefault(digest, threading.Lock())
        with lock:
            path = self._dir / digest.removeprefix(archives.DIGEST_PREFIX)
            if path.is_file():
                if self._verified.get(digest) == _identity(path):
                    return path  # hashed since its last change (the prefetch, a sibling task)
                if archives.sha256_file(path) == digest:
                    self._verified[digest] = _identity(path)
                    return path
                logger.warning("cached code %s is corrupt; fetching it again", digest)
                path.unlink()
            self._fetch(task, digest, path)
            self._verified[digest] = _identity(path)
            return path

    def prepare(self, task: DesiredTask, task_dir: Path) -> str | None:
        """Unpack the job's code into `task_dir/code`, read-only; its path, or None when
        the task has no code.

        Raises:
            CodeError: the archive could not be fetched, does not match its digest or is
                unsafe.
        """
        path = self.archive(task)
        if path is None:
            return None
        task_dir.mkdir(parents=True, exist_ok=True)
        dest = task_dir / "code"
        if dest.exists():  # a leftover of an earlier try of this attempt
            archives.make_writable(dest)
            shutil.rmtree(dest)
        try:
            archives.extract(path, dest, max_unpacked_bytes=MAX_UNPACKED_BYTES)
        except archives.UnsafeArchive as exc:
            raise CodeError(f"the job's code archive is refused: {exc}") from None
        return str(dest)

    def _fetch(self, task: DesiredTask, digest: str, path: Path) -> None:
        token = taskenv.JOB_TOKEN.read(task.env) or ""
        url = protocol.api_url(self._server, CODE_PATH.format(digest=digest))
        request = urllib.request.Request(
            url,
            headers={
                "Authorization": f"Job {task.job_id}:{token}",
                "User-Agent": rest.USER_AGENT,
            },
        )
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self._dir / f".{secrets.token_hex(8)}.part"
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as answer:
                got = _save(answer, tmp)
            if got != digest:
                raise CodeError(f"GET {url}: the archive's digest is {got}, not {digest}")
            os.replace(tmp, path)
        except urllib.error.HTTPError as error:
            with error:
                raise CodeError(f"GET {url} answered HTTP {error.code} {error.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            if isinstance(error, CodeError):
                raise
            raise CodeError(f"cannot fetch the job's code from {url}: {error}") from None
        finally:
            tmp.unlink(missing_ok=True)
        logger.info("fetched code %s for job %s", digest, task.job_id)


def _save(answer: io.BufferedIOBase, target: Path) -> str:
    """Copy the response body to `target`; its sha256 digest."""
    try:
        digest, _ = archives.copy_hashing(answer, target, MAX_ARCHIVE_BYTES)
    except archives.TooLarge as exc:
        raise CodeError(f"the code archive is larger than {MAX_ARCHIVE_BYTES} bytes") from exc
    return digest


def _identity(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns
