"""Where the agent keeps its files, and its state file: `{"server", "node_id",
"credential", "credential_issued_at", "credential_expires_at"}`, mode 0600."""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

# The agent's own settings (not part of any task's environment, see ps_runtime.taskenv).
STATE_ENV = "TRAINHUB_AGENT_STATE"
WORK_DIR_ENV = "TRAINHUB_AGENT_WORK_DIR"
# Written by /agent/install.sh into the virtualenv it installs (PREFIX/etc, beside the
# state file): that installation's state file and work dir, so that
# `PREFIX/bin/trainhub-agent run` needs no flags. `{"state_file": …, "work_dir": …}`.
INSTALL_CONFIG_NAME = "trainhub-agent.json"


class StateError(Exception):
    """The state file is missing or unusable; the message says what to do."""


# The agent renews its credential once this share of its lifetime has passed.
RENEW_AT_FRACTION = 2 / 3


@dataclass(frozen=True)
class AgentState:
    server: str
    node_id: int
    credential: str
    # When this agent received the credential (its own clock) and when the server says it
    # expires; None in a state file written before credentials expired (renew at once).
    credential_issued_at: datetime | None = None
    credential_expires_at: datetime | None = None

    def __repr__(self) -> str:  # never print the credential by accident
        return (
            f"AgentState(server={self.server!r}, node_id={self.node_id!r}, credential=***, "
            f"credential_expires_at={self.credential_expires_at!r})"
        )

    def renew_at(self) -> datetime | None:
        """When to renew the credential: two thirds into its lifetime (None: now)."""
        if self.credential_issued_at is None or self.credential_expires_at is None:
            return None
        lifetime = self.credential_expires_at - self.credential_issued_at
        return self.credential_issued_at + lifetime * RENEW_AT_FRACTION


@dataclass(frozen=True)
class InstallConfig:
    """The paths of the installation this agent runs from (see INSTALL_CONFIG_NAME)."""

    state_file: Path
    work_dir: Path


def install_config_path() -> Path:
    """Where the installer records its paths: PREFIX/etc of the running virtualenv."""
    return Path(sys.prefix) / "etc" / INSTALL_CONFIG_NAME


def load_install_config(path: Path | None = None) -> InstallConfig | None:
    """The installer's record of this installation's paths; None where there is none
    (an agent not installed by /agent/install.sh, e.g. a development checkout).

    Raises:
        StateError: the file is there but unreadable or corrupt.
    """
    path = path or install_config_path()
    try:
        raw = path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise StateError(
            f"cannot read {path}: {exc.strerror}; run the agent as the user that installed "
            "it (root for /opt/trainhub-agent), or pass --state-file and --work-dir"
        ) from None
    try:
        obj = json.loads(raw)
        values = (obj["state_file"], obj["work_dir"])
        if not all(isinstance(v, str) and Path(v).is_absolute() for v in values):
            raise ValueError("not two absolute paths")
    except (ValueError, KeyError, TypeError):
        raise StateError(
            f"{path} is corrupt; run the installer again (it rewrites the file) or pass "
            "--state-file and --work-dir"
        ) from None
    return InstallConfig(state_file=Path(values[0]), work_dir=Path(values[1]))


def default_state_path() -> Path:
    """$TRAINHUB_AGENT_STATE, else the installation's (PREFIX/etc/agent.json), else
    ~/.config/trainhub/agent.json.

    Raises:
        StateError: the installation's record of its paths is unreadable or corrupt.
    """
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env).expanduser()
    installed = load_install_config()
    if installed is not None:
        return installed.state_file
    return Path.home() / ".config" / "trainhub" / "agent.json"


def default_work_dir() -> Path:
    """Where task attempts get their working directories: $TRAINHUB_AGENT_WORK_DIR, else
    the installation's (PREFIX/work), else ~/.local/share/trainhub/agent.

    Raises:
        StateError: the installation's record of its paths is unreadable or corrupt.
    """
    env = os.environ.get(WORK_DIR_ENV)
    if env:
        return Path(env).expanduser()
    installed = load_install_config()
    if installed is not None:
        return installed.work_dir
    return Path.home() / ".local" / "share" / "trainhub" / "agent"


def save_state(path: Path, state: AgentState) -> None:
    """Write atomically: the file is created 0600 and renamed over the old one."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    document: dict[str, object] = {
        "server": state.server,
        "node_id": state.node_id,
        "credential": state.credential,
    }
    for name in ("credential_issued_at", "credential_expires_at"):
        when: datetime | None = getattr(state, name)
        if when is not None:
            document[name] = when.isoformat()
    data = json.dumps(document, indent=2).encode()
    # O_EXCL + mode 0600 at creation: the file is never readable by others, not even
    # between creation and a later chmod (umask can only remove bits).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_state(path: Path) -> AgentState:
    try:
        raw = path.read_text()
    except FileNotFoundError:
        raise StateError(
            f"no agent state at {path}; enroll first: "
            "`trainhub-agent enroll --server URL --token-file FILE`"
        ) from None
    except OSError as exc:
        raise StateError(f"cannot read agent state {path}: {exc.strerror}") from None
    try:
        obj = json.loads(raw)
        state = AgentState(
            server=str(obj["server"]),
            node_id=int(obj["node_id"]),
            credential=str(obj["credential"]),
            credential_issued_at=_optional_time(obj.get("credential_issued_at")),
            credential_expires_at=_optional_time(obj.get("credential_expires_at")),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        raise StateError(
            f"agent state {path} is corrupt; enroll again with `trainhub-agent enroll`"
        ) from None
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise StateError(
            f"agent state {path} is readable by other users (mode {mode:o}); "
            f"fix with `chmod 600 {path}`"
        )
    return state


def _optional_time(value: object) -> datetime | None:
    """An aware ISO 8601 time, or None; `ValueError` for anything else."""
    if value is None:
        return None
    parsed = datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        raise ValueError("a time without a timezone")
    return parsed
