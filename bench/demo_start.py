"""How long a fresh clone's `make demo` takes to a signed-in dashboard, what it installs,
and whether the submit form's default job succeeds there unedited.

    .venv/bin/python bench/demo_start.py [--cold] [--job] [--port N]

Clones this checkout's HEAD into a temporary directory and runs `make demo PORT=N` there
(a clean environment: none of this shell's DATABASE_URL, REDIS_URL or TRAINHUB_*), reads
the one-time admin password from its output, signs in through the login form and loads
the dashboard. `--cold` gives uv, npm and pip empty caches (everything is downloaded);
without it their caches are the machine's. `--job` then submits the submit page's form
exactly as it is served (its default job, no edits) and waits for the job to end.

Prints one JSON object: seconds to the banner and to the signed-in dashboard, the
environment's size in MB, how many lines `make demo` printed, whether its last two were
the URL and the password, when each of make's steps began (`stages`), and with `--job`
the job's state and seconds to it. make's output goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

ROOT = Path(__file__).resolve().parents[1]
KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "SSL_CERT_FILE", "PIP_CERT")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FormReader(HTMLParser):
    """The fields of one form as a browser would submit it unedited."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id, self.inside, self.action = form_id, False, ""
        self.fields: list[tuple[str, str]] = []
        self._textarea: str | None = None
        self._select: str | None = None
        self._options: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
            self.action = a.get("action", "") if self.inside else self.action
        if not self.inside or "disabled" in a:
            return
        if tag == "input" and a.get("name"):
            kind = a.get("type", "text")
            if kind in ("checkbox", "radio") and "checked" not in a:
                return
            if kind not in ("submit", "button", "file"):
                self.fields.append((a["name"], a.get("value", "on" if kind == "checkbox" else "")))
        elif tag == "textarea" and a.get("name"):
            self._textarea, self._text = a["name"], ""
        elif tag == "select" and a.get("name"):
            self._select, self._options = a["name"], []
        elif tag == "option" and self._select is not None:
            self._options.append((a.get("value", ""), "selected" in a))

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "textarea" and self._textarea is not None:
            self.fields.append((self._textarea, self._text.removeprefix("\n")))
            self._textarea = None
        elif tag == "select" and self._select is not None:
            chosen = [v for v, selected in self._options if selected] or [
                v for v, _ in self._options[:1]
            ]
            self.fields.extend((self._select, v) for v in chosen)
            self._select = None


def sign_in(client: httpx.Client, password: str) -> float:
    """Sign in as admin through the login form; seconds until the dashboard loaded."""
    started = time.monotonic()
    login = client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text)
    assert token, "no CSRF token on /login/"
    form = {"username": "admin", "password": password, "csrfmiddlewaretoken": token[1]}
    answer = client.post("/login/", data=form, headers={"Referer": f"{client.base_url}login/"})
    assert answer.status_code == 302, f"sign-in answered {answer.status_code}"
    dashboard = client.get("/")
    assert dashboard.status_code == 200 and "admin" in dashboard.text, "no signed-in dashboard"
    return time.monotonic() - started


def submit_default_job(client: httpx.Client, base: str, password: str) -> dict[str, Any]:
    """Submit /jobs/new/'s form as served; wait for the job to end (the API, as admin)."""
    page = client.get("/jobs/new/")
    reader = FormReader("job-form")
    reader.feed(page.text)
    assert reader.fields, "the submit page has no form with id job-form"
    action = reader.action or "/jobs/new/"
    answer = client.post(
        action,
        content=urlencode(reader.fields),  # repeated names (a multi-select) as a browser sends
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "Referer": f"{base}/jobs/new/",
        },
    )
    if answer.status_code != 302:
        said = re.findall(r'class="[^"]*(?:error|alert)[^"]*"[^>]*>(.*?)</', answer.text, re.S)
        raise AssertionError(f"the default job was refused ({answer.status_code}): {said}")
    job_id = int(re.search(r"/jobs/(\d+)/", answer.headers["location"])[1])  # type: ignore[index]
    token = httpx.post(
        f"{base}/api/v1/auth/token/", json={"username": "admin", "password": password}
    ).json()["token"]
    api = httpx.Client(base_url=f"{base}/api/v1", headers={"Authorization": f"Token {token}"})
    started = time.monotonic()
    while True:
        job = api.get(f"/jobs/{job_id}/").json()
        if job["state"] in ("succeeded", "failed", "cancelled") or time.monotonic() > started + 600:
            return {"job_state": job["state"], "job_seconds": round(time.monotonic() - started, 1)}
        time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="empty uv, npm and pip caches")
    parser.add_argument("--job", action="store_true", help="run the form's default job")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="leave the clone behind")
    args = parser.parse_args()
    port = args.port or free_port()
    tmp = Path(tempfile.mkdtemp(prefix="trainhub-demo-bench-"))
    tmp.chmod(0o711)  # a root agent's task uids traverse into the clone's runtime
    clone = tmp / "trainhub"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    if args.cold:
        env.update(
            UV_CACHE_DIR=str(tmp / "uv-cache"),
            npm_config_cache=str(tmp / "npm-cache"),
            PIP_NO_CACHE_DIR="1",
        )
    lines: list[str] = []
    stages: list[tuple[float, str]] = []  # (seconds, line) of make's steps and the banner
    banner, password = threading.Event(), [""]
    started = time.monotonic()
    make = subprocess.Popen(
        ["make", "demo", f"PORT={port}"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )

    def read() -> None:
        assert make.stdout is not None
        for line in make.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith(("make: ", "TrainHub")):
                stages.append((round(time.monotonic() - started, 1), line.strip()))
            found = re.search(r"sign in as admin with password (\S+)", line)
            if found:
                password[0] = found[1]
                banner.set()

    threading.Thread(target=read, daemon=True).start()
    result: dict[str, Any] = {"cold": args.cold, "port": port}
    try:
        if not banner.wait(timeout=600):
            print("\n".join(lines[-40:]), file=sys.stderr)
            raise SystemExit("make demo printed no password within 600 s")
        result["seconds_to_banner"] = round(time.monotonic() - started, 1)
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, follow_redirects=False, timeout=30) as client:
            sign_in(client, password[0])
            result["seconds_to_signed_in_dashboard"] = round(time.monotonic() - started, 1)
            time.sleep(0.5)  # anything printed right after the banner
            shown = [line for line in lines if line.strip()]
            result["lines_printed"] = len(lines)
            result["stages"] = stages
            result["ends_with_url_and_password"] = bool(
                len(shown) >= 2
                and shown[-2].startswith("TrainHub is up at")
                and password[0] in shown[-1]
            )
            du = subprocess.run(["du", "-sm", str(clone / ".venv")], capture_output=True, text=True)
            result["venv_mb"] = int(du.stdout.split()[0])
            if args.job:
                result.update(submit_default_job(client, base, password[0]))
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGINT)
            try:
                make.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(make.pid, signal.SIGKILL)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\n".join(lines), file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
