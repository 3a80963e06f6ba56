"""Every third-party package is installed from a lock file with its hashes (`make lock`
writes requirements/*.lock): the locks must pin, within its range, every package the two
pyprojects name, and the Makefile and the image must install from them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "requirements"
OWN = {"trainhub", "trainhub-runtime"}  # installed from the checkout, without dependencies
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def pins(lock: str) -> dict[str, str]:
    """name -> version of each `name==version` in a lock; each must carry a hash."""
    found: dict[str, str] = {}
    lines = (LOCKS / lock).read_text().splitlines()
    for at, line in enumerate(lines):
        match = PIN.match(line)
        if match is None:
            continue
        following = lines[at + 1] if at + 1 < len(lines) else ""
        assert "--hash=sha256:" in following, f"{lock}: {match.group(1)} has no hash"
        found[canonicalize_name(match.group(1))] = match.group(2)
    return found


def named(pyproject: Path, *extras: str) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text())["project"]
    listed = list(project["dependencies"])
    for extra in extras:
        listed += project["optional-dependencies"][extra]
    return [Requirement(r) for r in listed if canonicalize_name(Requirement(r).name) not in OWN]


@pytest.mark.parametrize(
    ("lock", "extras"), [("server.lock", ()), ("dev.lock", ("dev",))], ids=["server", "dev"]
)
def test_each_lock_pins_every_package_the_pyprojects_name_within_its_range(
    lock: str, extras: tuple[str, ...]
) -> None:
    locked = pins(lock)
    wanted = named(ROOT / "pyproject.toml") + named(ROOT / "platform" / "pyproject.toml", *extras)
    missing = [str(r) for r in wanted if canonicalize_name(r.name) not in locked]
    assert not missing, f"{lock} lacks {missing}: run `make lock`"
    outside = [
        f"{r} (locked {locked[canonicalize_name(r.name)]})"
        for r in wanted
        if not r.specifier.contains(locked[canonicalize_name(r.name)], prereleases=True)
    ]
    assert not outside, f"{lock} pins outside the pyprojects' ranges: {outside}; run `make lock`"


def test_the_locks_agree_on_every_package_they_share() -> None:
    server, dev, uv = pins("server.lock"), pins("dev.lock"), pins("uv.lock")
    differ = {n: (v, dev[n]) for n, v in server.items() if dev.get(n) != v}
    assert not differ, f"server.lock and dev.lock differ: {differ}; run `make lock`"
    assert uv == {"uv": server["uv"]}


def test_the_makefile_and_the_image_install_from_the_locks() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for lock in ("uv.lock", "server.lock", "dev.lock"):
        assert f"--require-hashes -r requirements/{lock}" in makefile, lock
    assert "--no-deps -e . -e ./platform" in makefile
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "pip install --no-cache-dir --require-hashes -r requirements/server.lock" in dockerfile
    assert "pip install --no-cache-dir --no-deps ./ ./platform" in dockerfile
