"""The task sandbox: every task runs inside bubblewrap (`bwrap`, Debian's `bubblewrap`).

bubblewrap is the sandbox Flatpak ships: a small program, installed from the node's
distribution, that builds the namespaces unprivileged (user namespaces), so it works the
same under a root agent (which first drops to the job's leased uid) and an unprivileged
one (docs/design.md "Task sandbox" says why this one). A task gets:

- its own user, PID and IPC namespaces: it is root nowhere, sees and signals only its
  own processes, and cannot create further user namespaces (`--disable-userns`);
- a mount namespace holding only what it needs: the system's `/usr` and a few `/etc`
  files, the runtime and its packages, its run directory (cluster file, TLS files) and
  code, all read-only; a writable scratch (`/tmp`, its home and working directory: a
  tmpfs of `TRAINHUB_TASK_SCRATCH_MB`), its checkpoint directory; a minimal `/dev` with
  only its own GPUs' device files — never the agent's state, other jobs' directories,
  the data directory of standalone or other devices;
- the host's network (tasks talk gRPC across hosts).

Memory, CPU and process-count limits stay in cgroups (`cgroups`). The agent builds the
command here; `taskwrap` runs it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

BWRAP_ENV = "TRAINHUB_BWRAP"
# Host paths every task sees read-only at the same place (datasets), os.pathsep-separated.
DATA_PATHS_ENV = "TRAINHUB_TASK_DATA_PATHS"
SCRATCH_MB_ENV = "TRAINHUB_TASK_SCRATCH_MB"
DEFAULT_SCRATCH_MB = 1024
MIB = 1024 * 1024

# What a task sees of the host's /etc: name resolution, TLS roots, locale and the
# dynamic loader's cache. Never the rest (credentials, service configs, the agent's own).
ETC_FILES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "gai.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
)
# Top-level system directories: bound read-only, or recreated as the same symlink
# (merged /usr: /bin -> usr/bin).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The NVIDIA control devices every CUDA process opens beside its own /dev/nvidia<N>.
NVIDIA_CONTROL = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
# Where a task's scratch lives inside its sandbox: HOME, the working directory and /tmp.
SCRATCH = "/tmp"


class SandboxError(RuntimeError):
    """The node cannot sandbox tasks; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class TaskMounts:
    """The host paths one task's sandbox holds besides the system and the runtime."""

    run_dir: Path  # read-only: cluster file, TLS files
    code_dir: Path | None = None  # read-only: the job's unpacked code
    checkpoint_dir: Path | None = None  # writable: the job's checkpoints
    gpu_indices: Sequence[int] = ()
    env_dir: Path | None = None  # read-only: the job's own Python environment


def bwrap_path(environ: Mapping[str, str]) -> str:
    """The bubblewrap executable: `TRAINHUB_BWRAP`, else `bwrap` on PATH.

    Raises:
        SandboxError: none is installed.
    """
    configured = environ.get(BWRAP_ENV, "")
    found = configured or shutil.which("bwrap") or ""
    if not found or not os.access(found, os.X_OK):
        raise SandboxError(
            f"bubblewrap is not installed ({BWRAP_ENV}={configured!r}, no bwrap on PATH): "
            "install the distribution's package (Debian/Ubuntu: apt-get install bubblewrap)"
        )
    return found


def bwrap_version(bwrap: str) -> tuple[int, ...]:
    """bubblewrap's version (`bwrap --version`: "bubblewrap 0.8.0"); () when unreadable."""
    try:
        done = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ()
    words = done.stdout.split()
    parts = words[-1].split(".") if words else []
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):
        return ()
    return tuple(int(p) for p in parts)


def scratch_bytes(environ: Mapping[str, str]) -> int:
    """The size of a task's scratch tmpfs from `TRAINHUB_TASK_SCRATCH_MB`."""
    text = environ.get(SCRATCH_MB_ENV, "") or str(DEFAULT_SCRATCH_MB)
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise SandboxError(f"{SCRATCH_MB_ENV}={text!r} must be a whole number of MiB ≥ 1")
    return int(text) * MIB


def data_paths(environ: Mapping[str, str]) -> tuple[str, ...]:
    """`TRAINHUB_TASK_DATA_PATHS`: absolute, existing host paths.

    Raises:
        SandboxError: naming a path that is relative or absent.
    """
    paths: list[str] = []
    for text in (environ.get(DATA_PATHS_ENV, "") or "").split(os.pathsep):
        if not text:
            continue
        path = Path(text)
        if not path.is_absolute() or not path.exists():
            raise SandboxError(
                f"{DATA_PATHS_ENV}: {text!r} must be an absolute path that exists on this node"
            )
        paths.append(str(path.resolve()))
    return tuple(paths)


def runtime_mounts(
    python: str, pythonpath: Iterable[str], *, private: Iterable[Path] = ()
) -> tuple[str, ...]:
    """Host paths a task needs read-only to run the runtime: the interpreter at the path
    tasks start it by (a virtualenv's `bin/python` too), its installation when that lies
    outside /usr, and every import path (the `ps_runtime` package alone when the import
    path is a source checkout).

    Raises:
        SandboxError: one of them holds a `private` path (the agent's state or work
            directory), which no sandbox may contain.
    """
    paths: list[str] = []
    if not Path(python).is_relative_to("/usr"):
        paths.append(python)
    real = Path(python).resolve()
    home = Path(sys.base_prefix) if real == Path(sys.executable).resolve() else real.parent.parent
    if not home.is_relative_to("/usr") and home != Path("/"):
        paths.append(str(home))
    for entry in (Path(p) for p in pythonpath):
        if not entry.is_dir():
            continue
        package = entry / "ps_runtime"
        is_checkout = package.is_dir() and not entry.name.endswith("-packages")
        paths.append(str(package if is_checkout else entry))
    unique: list[str] = []
    for path in paths:
        if path not in unique and not any(Path(path).is_relative_to(u) for u in unique):
            unique.append(path)
    for path in unique:
        for secret in private:
            if secret.resolve().is_relative_to(Path(path).resolve()):
                raise SandboxError(
                    f"the runtime's {path} holds the agent's {secret}, which no task may "
                    "see: keep the agent's state and work directory outside the runtime's "
                    "installation and import paths"
                )
    return tuple(unique)


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How this node wraps a task command (decided once at agent start)."""

    bwrap: str
    runtime: tuple[str, ...] = ()
    scratch: int = DEFAULT_SCRATCH_MB * MIB
    dev: Path = Path("/dev")
    etc: Path = Path("/etc")
    # `--disable-userns` came with bubblewrap 0.8 (Debian 12); older ones go without.
    disable_userns: bool = True

    def command(self, mounts: TaskMounts, argv: Sequence[str]) -> list[str]:
        """`argv` inside the sandbox, as a bwrap command line."""
        args = [
            self.bwrap,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            *(["--disable-userns"] if self.disable_userns else []),
            "--die-with-parent",
            # The scratch first: the mounts below may land inside /tmp on this host.
            "--size",
            str(self.scratch),
            "--tmpfs",
            SCRATCH,
            "--chdir",
            SCRATCH,
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ]
        args += _system_args()
        args += _etc_args(self.etc)
        for path in self.runtime:
            args += ["--ro-bind", path, path]
        args += ["--ro-bind", str(mounts.run_dir), str(mounts.run_dir)]
        if mounts.code_dir is not None:
            args += ["--ro-bind", str(mounts.code_dir), str(mounts.code_dir)]
        if mounts.env_dir is not None:
            args += ["--ro-bind", str(mounts.env_dir), str(mounts.env_dir)]
        if mounts.checkpoint_dir is not None:
            args += ["--bind", str(mounts.checkpoint_dir), str(mounts.checkpoint_dir)]
        args += gpu_args(self.dev, mounts.gpu_indices)
        # Last: the sandbox's own root (bubblewrap's tmpfs, which holds the mount points)
        # becomes read-only, so the scratch is the one place without a checkpoint to fill.
        args += ["--remount-ro", "/"]
        return [*args, "--", *argv]

    def probe(
        self,
        python: str,
        pythonpath: Sequence[str],
        identity: tuple[int, int] | None,
        run_dir: Path,
    ) -> None:
        """Start the runtime inside a sandbox the way a task starts, as `identity`.

        Raises:
            SandboxError: with bubblewrap's own message.
        """
        run_dir.mkdir(parents=True, exist_ok=True)
        code = "import ps_runtime.task, numpy, grpc"
        command = self.command(TaskMounts(run_dir), [python, "-c", code])
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=60,
                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(pythonpath)},
                preexec_fn=_drop_to(identity) if identity is not None else None,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxError(f"cannot run bubblewrap ({self.bwrap}): {exc}") from None
        if done.returncode != 0:
            who = f"uid {identity[0]}" if identity else "this user"
            detail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise SandboxError(
                f"bubblewrap could not start the runtime as {who} "
                f"(exit {done.returncode}): {' / '.join(detail)}. Unprivileged user "
                "namespaces must be allowed (sysctl kernel.unprivileged_userns_clone=1 "
                "where it exists; kernel.apparmor_restrict_unprivileged_userns=0 on "
                "Ubuntu ≥ 23.10) and the runtime readable by the task uids"
            )


def _drop_to(identity: tuple[int, int]) -> Callable[[], None]:
    uid, gid = identity

    def drop() -> None:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    return drop


def _system_args(root: Path = Path("/")) -> list[str]:
    args: list[str] = []
    for name in SYSTEM_DIRS:
        path = root / name.lstrip("/")
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", str(path), name]
    return args


def _etc_args(etc: Path) -> list[str]:
    args: list[str] = []
    for name in ETC_FILES:
        path = etc / name
        if path.exists():  # a dangling link (resolv.conf without systemd) is left out
            args += ["--ro-bind", str(path), f"/etc/{name}"]
    return args


def gpu_args(dev: Path, gpu_indices: Sequence[int]) -> list[str]:
    """Device binds for the task's own GPUs (and the control devices CUDA needs when it
    has any); every other device file of the node is absent from its /dev."""
    if not gpu_indices:
        return []
    args: list[str] = []
    for index in sorted(set(gpu_indices)):
        path = dev / f"nvidia{index}"
        if _is_char_device(path):
            args += ["--dev-bind", str(path), f"/dev/nvidia{index}"]
    for name in NVIDIA_CONTROL:
        path = dev / name
        if _is_char_device(path):
            args += ["--dev-bind", str(path), f"/dev/{name}"]
    caps = dev / "nvidia-caps"
    if caps.is_dir():
        args += ["--dev-bind", str(caps), "/dev/nvidia-caps"]
    return args


def _is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False
