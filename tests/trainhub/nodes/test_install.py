"""The install line shown for an enrollment token: it saves the token to a file the
installer reads (`--token-file`), never on a command line, adds `--insecure` for an http
server, and works as pasted into sh or bash, with options appended at its end."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from trainhub.nodes.install import install_command

from ...conftest import skip_outside_ci

TOKEN = "Zm9vYmFyLXRva2VuLXNlY3JldA_-x"
SAVED = "~/trainhub-enroll-token"
# What the fake `curl` serves in place of the installer: it records its arguments and the
# token file as read, the way the real one reads it (before enrolling).
FAKE_INSTALLER = r"""
printf '%s\n' "$@" > "$LOG/installer.args"
while [ $# -gt 0 ]; do
    if [ "$1" = --token-file ]; then cat "$2" > "$LOG/installer.token"; fi
    shift
done
"""


def test_the_line_saves_the_token_then_installs_with_token_file() -> None:
    assert install_command("https://trainhub.example.com/", TOKEN) == (
        f"(umask 077 && printf '%s\\n' {TOKEN} > {SAVED}) && "
        "curl -fsSL https://trainhub.example.com/agent/install.sh | sh -s -- "
        f"--server https://trainhub.example.com --token-file {SAVED}"
    )


def test_a_plain_http_server_gets_insecure() -> None:
    assert install_command("http://10.0.0.1:8000", TOKEN).endswith(
        f"| sh -s -- --server http://10.0.0.1:8000 --insecure --token-file {SAVED}"
    )
    assert "--insecure" not in install_command("https://10.0.0.1:8000", TOKEN)


def _fake_bin(tmp_path: Path) -> Path:
    """A `curl` that logs its arguments and every process's command line while it runs,
    then serves FAKE_INSTALLER; a `printf` that logs being run as a program (the shell
    must use its builtin, or the token would be in the process list)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "installer.sh").write_text(FAKE_INSTALLER)
    curl = bin_dir / "curl"
    curl.write_text(
        "#!/bin/sh\n"
        'printf \'%s\\n\' "$@" > "$LOG/curl.args"\n'
        'cat /proc/[0-9]*/cmdline > "$LOG/cmdlines" 2>/dev/null\n'
        'cat "$LOG/installer.sh"\n'
    )
    printf = bin_dir / "printf"
    printf.write_text('#!/bin/sh\necho "$@" >> "$LOG/printf.run"\n')
    for program in (curl, printf):
        program.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("token", [TOKEN, "it's $(touch pwned) `touch pwned` \\ *"])
def test_pasted_into_a_shell_the_token_reaches_the_installer_only_in_a_private_file(
    tmp_path: Path, shell: str, token: str
) -> None:
    if shutil.which(shell) is None:
        skip_outside_ci(f"no {shell} here")
    home = tmp_path / "home"
    home.mkdir()
    line = install_command("http://trainhub.test:8000", token) + " --prefix /opt/th --no-service"
    # Typed on the shell's standard input, as pasted at a prompt: not in its arguments
    # (`sh -c LINE` would put it there). The last line shows the shell's umask after.
    pasted = subprocess.run(
        [shell],
        input=f"umask 022\n{line}\numask\n",
        cwd=tmp_path,
        env={
            "PATH": f"{_fake_bin(tmp_path)}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(home),
            "LOG": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert pasted.returncode == 0, pasted.stderr
    assert pasted.stdout.strip() == "0022"  # the umask 077 stayed in its subshell

    saved = home / "trainhub-enroll-token"
    assert saved.read_text() == token + "\n"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert (tmp_path / "installer.token").read_text() == token + "\n"
    assert (tmp_path / "curl.args").read_text().splitlines() == [
        "-fsSL",
        "http://trainhub.test:8000/agent/install.sh",
    ]
    assert (tmp_path / "installer.args").read_text().splitlines() == [
        "--server",
        "http://trainhub.test:8000",
        "--insecure",
        "--token-file",
        str(saved),
        "--prefix",
        "/opt/th",
        "--no-service",
    ]
    assert not (tmp_path / "printf.run").exists()  # printf ran as the shell's builtin
    if Path("/proc/self/cmdline").exists():
        cmdlines = (tmp_path / "cmdlines").read_bytes()
        assert b"-fsSL" in cmdlines  # the snapshot has curl's own
        assert token.encode() not in cmdlines
    assert not list(tmp_path.rglob("pwned"))
