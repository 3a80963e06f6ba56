"""Is a job's end labelled with its cause, on the job page and in the API?

The page is read as a signed-in user reads it (the web's own sign-in form, a session
cookie, a plain GET of /jobs/<id>/): a stalled job is marked beside its state; the
cause shows in the task table's cause column,
in the note above it while a restarted job runs on ("Last restart: …"), after " — " in
the job's reason, and in the events timeline. The API's are the `end_cause` fields of
the job and its tasks.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import httpx

from tests.e2e.cluster import ADMIN, LiveCluster

# One row per cause case (case, cause, restarts, resumed_at, seconds), printed at the end.
LABELLED: list[dict[str, Any]] = []
# "worker 0 exited with code 1 — user_exception: ValueError: …": the cause after " — ".
_REASON_CAUSE = re.compile(r"— ([a-z_]+)(?::|$)")
_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta"})


def web_session(url: str, username: str = ADMIN[0], password: str = ADMIN[1]) -> httpx.Client:
    """A client signed in through the web's sign-in form (session and CSRF cookies)."""
    client = httpx.Client(base_url=url, timeout=30, follow_redirects=True)
    form = client.get("/login/")
    form.raise_for_status()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert token is not None, "the sign-in form has no CSRF token"
    signed_in = client.post(
        "/login/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": token[1],
            "next": "/",
        },
    )
    signed_in.raise_for_status()
    assert "sessionid" in client.cookies, f"sign-in refused: {signed_in.text[:500]}"
    return client


@dataclass
class JobPage:
    """What the job page says about why its tasks ended."""

    state: str = ""
    stalled: bool = False  # the "stalled" mark beside a running job's state
    reason: str = ""
    last_restart: str = ""  # the "Last restart: <cause>" note's cause
    task_causes: list[str] = field(default_factory=list)  # the task table's cause column
    events: list[str] = field(default_factory=list)  # the timeline's lines

    def causes(self) -> set[str]:
        """Every cause the page names, wherever it names one."""
        found = {c for c in (self.last_restart, *self.task_causes) if c}
        for text in (self.reason, *self.events):
            found.update(m[1] for m in _REASON_CAUSE.finditer(text))
        return found


class _JobPageParser(HTMLParser):
    """Reads `JobPage` from the page's ids (#job-state, #job-reason, #job-last-cause,
    #events) and classes (td.task-cause)."""

    def __init__(self) -> None:
        super().__init__()
        self.page = JobPage()
        self._open: list[tuple[str, str]] = []  # (tag, what its text is for)
        self._text: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        what = ""
        if a.get("id") in ("job-state", "job-reason", "job-last-cause"):
            what = str(a["id"])
        elif a.get("id") == "job-stalled":
            self.page.stalled = True
        elif tag == "td" and "task-cause" in (a.get("class") or "").split():
            what = "task-cause"
        elif tag == "code" and self._within("task-cause", "job-last-cause"):
            what = "code-" + self._innermost()
        elif tag == "li" and self._within("events"):
            what = "event"
        elif a.get("id") == "events":
            what = "events"
        if tag in _VOID:
            return
        self._open.append((tag, what))
        if what:
            self._text[what] = []

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            opened, what = self._open.pop()
            if what:
                self._close(what)
            if opened == tag:
                return

    def handle_data(self, data: str) -> None:
        for _, what in self._open:
            if what in self._text:
                self._text[what].append(data)

    def _within(self, *whats: str) -> bool:
        return any(what in whats for _, what in self._open)

    def _innermost(self) -> str:
        return next(w for _, w in reversed(self._open) if w in ("task-cause", "job-last-cause"))

    def _close(self, what: str) -> None:
        text = " ".join("".join(self._text.pop(what, [])).split())
        if what == "job-state":
            self.page.state = text
        elif what == "job-reason":
            self.page.reason = text
        elif what == "code-job-last-cause":
            self.page.last_restart = text
        elif what == "code-task-cause":
            self.page.task_causes.append(text)
        elif what == "event":
            self.page.events.append(text)


def job_page(web: httpx.Client, job_id: int) -> JobPage:
    response = web.get(f"/jobs/{job_id}/")
    response.raise_for_status()
    parser = _JobPageParser()
    parser.feed(response.text)
    parser.close()
    return parser.page


def api_causes(job: dict[str, Any]) -> set[str]:
    """The causes the API gives for the job and its tasks."""
    return {c for c in (job["end_cause"], *(t["end_cause"] for t in job["tasks"])) if c}


def wait_labelled(
    cluster: LiveCluster,
    web: httpx.Client,
    job_id: int,
    cause: str | tuple[str, ...],
    *,
    task: str = "",
    timeout: float = 120,
) -> tuple[dict[str, Any], JobPage]:
    """Wait until the API gives the job's end `cause` (the job's `end_cause`; with
    `task`, "worker-0" say, that task's too), then require the page to name it. A tuple
    of causes accepts any one of them (the same for API and page).

    The page is read at once after the API: a cause may last only until the next end
    (a finished job's is `succeeded`). Returns the job and its page."""
    wanted = (cause,) if isinstance(cause, str) else cause
    deadline = time.monotonic() + timeout
    while True:
        job = cluster.job(job_id)
        tasks = {f"{t['role']}-{t['index']}": t for t in job["tasks"]}
        found = job["end_cause"]
        if found in wanted and (not task or tasks[task]["end_cause"] == found):
            break
        if time.monotonic() > deadline:
            raise AssertionError(
                f"job {job_id} ended {sorted(api_causes(job))} in the API, not {wanted} "
                f"({job['state']}: {job['message']})\n{cluster.logs(job_id)}"
            )
        time.sleep(0.3)
    page = job_page(web, job_id)
    assert found in page.causes(), (found, page)
    return job, page


def record_labelled(
    case: str, cause: str, job: dict[str, Any], *, resumed_at: int, since: float
) -> None:
    """A row of the causes summary: what the case cost and how long it took."""
    LABELLED.append(
        {
            "case": case,
            "cause": cause,
            "restarts": f"{job['restarts']}+{job['infra_restarts']}",
            "resumed_at": resumed_at,
            "seconds": round(time.monotonic() - since, 1),
        }
    )


__all__ = [
    "LABELLED",
    "JobPage",
    "api_causes",
    "job_page",
    "record_labelled",
    "wait_labelled",
    "web_session",
]
