"""Where the CLI keeps its login: ~/.config/trainhub/cli.json (or $TRAINHUB_CONFIG), 0600."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


class NotLoggedIn(Exception):
    pass


@dataclass(frozen=True)
class Login:
    url: str
    token: str
    username: str


def config_path() -> Path:
    override = os.environ.get("TRAINHUB_CONFIG")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trainhub" / "cli.json"


def save(login: Login) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Create with 0600 from the start, so the token is never readable by others.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(login), f, indent=2)
    os.chmod(path, 0o600)
    return path


def load() -> Login:
    path = config_path()
    try:
        data = json.loads(path.read_text())
        return Login(url=data["url"], token=data["token"], username=data.get("username", ""))
    except FileNotFoundError:
        raise NotLoggedIn(
            f"Not logged in ({path} does not exist); run `trainhub login URL`."
        ) from None
    except (ValueError, KeyError) as exc:
        raise NotLoggedIn(
            f"{path} is not a valid login file ({exc}); run `trainhub login URL`."
        ) from None
