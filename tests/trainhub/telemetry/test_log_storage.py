"""Log lines stored per task with byte offsets; NUL and invalid UTF-8 cleaned at ingest.

A task's lines, in id order, are its stored stream: the download of that task is that
stream byte for byte and each line starts at its `offset` in it. Text PostgreSQL cannot
hold (NUL, lone surrogates from invalid UTF-8) is replaced with U+FFFD, never fatal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainhub.jobs.models import Job, Task
from trainhub.telemetry.chunks import stored_points
from trainhub.telemetry.models import LogLine
from trainhub.telemetry.selectors import log_lines, log_text
from trainhub.telemetry.services import MAX_LINE_CHARS, ingest_logs, ingest_metrics
from trainhub.telemetry.text import clean_text
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Rollback(Exception):
    pass


@pytest.fixture
def job() -> Job:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    return make_job(alice)


def _task(job: Job, role: str = "worker", index: int = 0) -> Task:
    task, _ = Task.objects.get_or_create(
        job=job, role=role, index=index, defaults={"cpu": 0.5, "memory_mb": 512}
    )
    return task


def _stored(task: Task) -> list[tuple[int, str]]:
    return list(LogLine.objects.filter(task=task).order_by("id").values_list("offset", "line"))


def test_offsets_count_utf8_bytes_per_task_across_streams_and_chunks(job: Job) -> None:
    worker, ps = _task(job), _task(job, "ps", 0)
    ingest_logs(task=worker, stream="stdout", lines=["ab", "héllo"], now=NOW)
    ingest_logs(task=ps, stream="stdout", lines=["ps"], now=NOW)
    ingest_logs(task=worker, stream="stderr", lines=["", "€"], now=NOW)
    # "ab\n" is 3 bytes, "héllo\n" 7, "\n" 1: one stream per task, stdout and stderr alike.
    assert _stored(worker) == [(0, "ab"), (3, "héllo"), (10, ""), (11, "€")]
    assert _stored(ps) == [(0, "ps")]
    stream = b"".join(log_text(job.pk, worker.pk))
    assert stream == "ab\nhéllo\n\n€\n".encode()
    for offset, line in _stored(worker):
        assert stream[offset:].startswith(f"{line}\n".encode())


def test_nul_and_invalid_utf8_are_replaced_never_fatal(job: Job) -> None:
    task = _task(job)
    raw = b"bad \xff\xfe bytes".decode("utf-8", errors="surrogateescape")
    stored = ingest_logs(
        task=task,
        stream="stdout",
        lines=["a\x00b", raw, "lone \ud800 surrogate", b"raw \xc3\x28 bytes", "fine"],
        now=NOW,
    )
    expected = [
        "a\ufffdb",
        "bad \ufffd\ufffd bytes",
        "lone \ufffd surrogate",
        "raw \ufffd( bytes",
        "fine",
    ]
    assert [line["line"] for line in stored] == expected
    assert [line for _, line in _stored(task)] == expected
    assert [x["line"] for x in log_lines(job, search="\ufffd")] == expected[:4]


def test_a_metric_name_that_cannot_be_stored_is_skipped_and_the_rest_kept(job: Job) -> None:
    task = _task(job)
    ingest_metrics(
        task=task,
        points=[{"step": 1, "values": {"lo\x00ss": 1.0, "bad\udcff": 2.0, "ok": 3.0}}],
        now=NOW,
    )
    assert [(n, v) for _, _, n, _, v, _ in stored_points()] == [("ok", 3.0)]


def test_a_line_is_cut_after_cleaning_to_max_line_chars(job: Job) -> None:
    task = _task(job)
    ingest_logs(task=task, stream="stdout", lines=["é" * (MAX_LINE_CHARS + 1)], now=NOW)
    assert _stored(task) == [(0, "é" * MAX_LINE_CHARS)]


# Any text at all: control characters, NUL, lone surrogates, astral characters; and bytes.
any_text = st.text(
    st.one_of(
        st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None),
        st.sampled_from(["\x00", "\ud800", "\udcff", "\udfff", "é", "\U0001f600"]),
    )
)
any_line = st.one_of(any_text, st.binary(max_size=40), st.integers())


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.tuples(st.booleans(), st.lists(any_line, max_size=8)), max_size=6))
def test_any_lines_are_stored_and_the_task_stream_matches_their_offsets(
    job: Job, chunks: list[tuple[bool, list[Any]]]
) -> None:
    try:
        with transaction.atomic():
            worker, ps = _task(job), _task(job, "ps", 0)
            for to_ps, lines in chunks:
                ingest_logs(task=ps if to_ps else worker, stream="stdout", lines=lines, now=NOW)
            for task, to_ps in ((worker, False), (ps, True)):
                sent = [clean_text(x) for c in chunks if c[0] == to_ps for x in c[1]]
                stored = _stored(task)
                assert [line for _, line in stored] == sent
                stream = b"".join(log_text(job.pk, task.pk))
                assert stream == "".join(f"{line}\n" for line in sent).encode()
                for offset, line in stored:
                    assert stream[offset : offset + len(line.encode()) + 1] == (
                        f"{line}\n".encode()
                    )
            raise Rollback
    except Rollback:
        pass
