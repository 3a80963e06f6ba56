"""Tiny wheels made on the spot, for environment builds that need no network: a local
"find links" directory (`UV_FIND_LINKS`) with `UV_NO_INDEX=1` is a whole package index."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path


def make_wheel(
    wheelhouse: Path, name: str, version: str = "1.0", *, payload_bytes: int = 0, code: str = ""
) -> Path:
    """A pure-Python wheel `name-version` whose module `name` holds `code` (default: a
    VALUE constant) and, with `payload_bytes`, a data file of that many random bytes."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files: dict[str, bytes] = {
        f"{name}/__init__.py": (code or f"VALUE = {version!r}\n").encode(),
        f"{dist}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n").encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    if payload_bytes:
        files[f"{name}/payload.bin"] = os.urandom(payload_bytes)
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = wheelhouse / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return wheel


def offline_index(wheelhouse: Path) -> dict[str, str]:
    """uv settings that make `wheelhouse` the only source of packages (pip's own
    configuration files of this machine left out)."""
    return {
        "UV_FIND_LINKS": str(wheelhouse),
        "UV_NO_INDEX": "1",
        "UV_OFFLINE": "1",
        "PIP_CONFIG_FILE": os.devnull,
    }
