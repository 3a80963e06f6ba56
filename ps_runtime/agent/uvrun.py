"""Running uv for the agent's environment builds: which uv, with which of the agent's
settings, bounded by a deadline, its output streamed line by line, and its failure told
in its own words with the requirement it is about.

uv sees the agent's network settings (proxies, TLS roots, netrc), uv's own settings
(`UV_*`, `/etc/uv/uv.toml`) and pip's index settings translated (`index-url`,
`extra-index-url`, `find-links`, `constraint`, from pip's configuration files and its
`PIP_*` variables): the node's package index settings. Nothing else of the agent's
environment reaches it.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

UV_ENV = "TRAINHUB_UV"
LOG_TAIL_LINES = 30
# Agent variables uv sees: the network's and TLS's, and the node's index settings.
PASSED = ("PATH", "HOME", "LANG", "LC_ALL", "SSL_CERT_FILE", "SSL_CERT_DIR", "NETRC")
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
PIP_TO_UV = {
    "PIP_INDEX_URL": "UV_INDEX_URL",
    "PIP_EXTRA_INDEX_URL": "UV_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS": "UV_FIND_LINKS",
    "PIP_CONSTRAINT": "UV_CONSTRAINT",
}
# uv's decorations around its reasons.
DECORATIONS = " \u00d7\u2570\u2500\u25b6\u2502"


class EnvironmentBuildError(RuntimeError):
    """The environment could not be built; the message says why, in uv's words."""


def find_uv(environ: Mapping[str, str]) -> str | None:
    """uv: `TRAINHUB_UV`, else the one installed with the runtime, else on PATH."""
    configured = environ.get(UV_ENV, "")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    beside = Path(sys.executable).parent / "uv"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv")


def pip_config_files(environ: Mapping[str, str]) -> list[Path]:
    """pip's configuration files, least specific first (site-wide, then the user's, then
    `PIP_CONFIG_FILE`), as pip reads them; none when `PIP_CONFIG_FILE` is `/dev/null`."""
    if environ.get("PIP_CONFIG_FILE") == os.devnull:
        return []
    home = Path(environ.get("HOME", "/root"))
    xdg = [
        Path(d) / "pip" / "pip.conf" for d in environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    ]
    files = [*xdg, Path("/etc/pip.conf"), home / ".pip" / "pip.conf"]
    files.append(home / ".config" / "pip" / "pip.conf")
    if environ.get("PIP_CONFIG_FILE"):
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    return files


def pip_settings(environ: Mapping[str, str], files: Sequence[Path] | None = None) -> dict[str, str]:
    """The node's pip index settings as `PIP_*` variables: its configuration files'
    `[global]` and `[install]` values, overridden by the variables themselves."""
    parser = configparser.ConfigParser(interpolation=None)
    for path in pip_config_files(environ) if files is None else files:
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
    settings: dict[str, str] = {}
    for section in ("global", "install"):
        if parser.has_section(section):
            for pip_name in PIP_TO_UV:
                key = pip_name.removeprefix("PIP_").lower().replace("_", "-")
                if parser.has_option(section, key):
                    settings[pip_name] = " ".join(parser.get(section, key).split())
    settings.update({k: environ[k] for k in PIP_TO_UV if environ.get(k)})
    return settings


def uv_environment(
    environ: Mapping[str, str], cache_dir: Path, pip_files: Sequence[Path] | None = None
) -> dict[str, str]:
    """What uv runs with: the agent's network and index settings, nothing else of it."""
    env = {name: environ[name] for name in PASSED if environ.get(name)}
    for name in PROXIES:
        for spelling in (name, name.lower()):
            if environ.get(spelling):
                env[spelling] = environ[spelling]
    for pip_name, text in pip_settings(environ, pip_files).items():
        uv_name = PIP_TO_UV[pip_name]
        if not environ.get(uv_name):
            env[uv_name] = ",".join(text.split()) if uv_name == "UV_FIND_LINKS" else text
    env.update({k: v for k, v in environ.items() if k.startswith("UV_")})
    env.update(UV_CACHE_DIR=str(cache_dir), NO_COLOR="1", UV_NO_PROGRESS="1")
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


class Uv:
    """One node's uv: runs it with the node's settings, and kills what runs on request."""

    def __init__(self, environ: Mapping[str, str], cache_dir: Path, cwd: Path) -> None:
        self.path = find_uv(environ)
        self.cache_dir = cache_dir
        self._env = uv_environment(environ, cache_dir)
        self._cwd = cwd
        self._lock = threading.Lock()
        self._processes: set[subprocess.Popen[str]] = set()  # guarded by _lock

    def run(
        self,
        args: Sequence[str],
        on_line: Callable[[str], None],
        tail: list[str],
        deadline: float,
        requirements: Sequence[str] = (),
    ) -> None:
        """Run `uv args`, every output line to `on_line` and the last ones kept in `tail`.

        Raises:
            EnvironmentBuildError: uv is missing, failed (its reason, naming the
                requirement of `requirements` it is about) or passed `deadline`.
        """
        if self.path is None:
            raise EnvironmentBuildError(
                "uv is not installed on this node: install the runtime again (it depends on "
                f"uv) or set {UV_ENV} to a uv executable"
            )
        proc = subprocess.Popen(
            [self.path, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,
            preexec_fn=lambda: os.umask(0o022),
        )
        with self._lock:
            self._processes.add(proc)
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), kill_group, (proc,))
        timer.daemon = True
        timer.start()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.rstrip()
                if line:
                    tail.append(line)
                    del tail[:-LOG_TAIL_LINES]
                    on_line(line)
            code = proc.wait()
        finally:
            timer.cancel()
            with self._lock:
                self._processes.discard(proc)
        if code == 0:
            return
        if time.monotonic() >= deadline:
            raise EnvironmentBuildError(
                "the environment build did not finish within its timeout "
                "(environment.timeout_seconds in the job spec); its last lines: "
                + " / ".join(tail[-3:])
            )
        raise EnvironmentBuildError(explain(tail, requirements, code))

    def abort_all(self) -> None:
        """Kill every uv in progress (the agent is stopping)."""
        with self._lock:
            processes = list(self._processes)
        for proc in processes:
            kill_group(proc)


def kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def explain(tail: Sequence[str], requirements: Sequence[str], code: int) -> str:
    """uv's own reason (from its `error:` line on), naming the requirement it is about."""
    first = next((i for i, line in enumerate(tail) if line.lstrip().startswith("error")), None)
    lines = tail[first:] if first is not None else tail[-3:]
    text = " ".join(line.strip(DECORATIONS) for line in lines if line.strip()) or f"exit {code}"
    text = text.removeprefix("error: ")
    said = _normal(text)
    names = [r for r in requirements if _name(r) and _normal(_name(r)) in said]
    which = f"requirement {names[0]!r}: " if names else ""
    return f"the environment could not be built: {which}{text}"


def _normal(text: str) -> str:
    """Names as uv says them (PEP 503: `-`, `_` and `.` alike, any case)."""
    return re.sub(r"[-_.]+", "-", text).lower()


def _name(requirement: str) -> str:
    for i, ch in enumerate(requirement):
        if not (ch.isalnum() or ch in "._-"):
            return requirement[:i]
    return requirement


def python_version(python: str) -> str:
    """`3.11` for an interpreter (this process's own without starting it)."""
    if Path(python).resolve() == Path(sys.executable).resolve():
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"{sys.version_info.major}.{sys.version_info.minor}"


def runtime_requirements() -> list[str]:
    """The runtime's own dependencies, for an environment on another Python (the agent's
    compiled packages do not load there)."""
    from importlib import metadata

    try:
        declared = metadata.requires("trainhub-runtime") or []
    except metadata.PackageNotFoundError:
        declared = ["numpy", "grpcio", "protobuf"]
    return [r for r in declared if "extra ==" not in r and not r.startswith("uv")]
