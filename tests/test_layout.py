"""The repository layout never shadows the standard library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_platform_from_repo_root_is_the_stdlib_module() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import platform; print(platform.system()); print(platform.__file__)",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    system, origin = done.stdout.splitlines()
    assert system == "Linux"
    assert not origin.startswith(str(REPO))


def test_platform_folder_is_not_a_package() -> None:
    assert not (REPO / "platform" / "__init__.py").exists()
