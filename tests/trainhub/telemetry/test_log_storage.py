"""Log lines stored per task with byte offsets; NUL and invalid UTF-8 cleaned at ingest.

A task's lines, in id order, are its stored stream: the download of that task is that
stream byte for byte and each line starts at its `offset` in it. Text PostgreSQL cannot
hold (NUL, lone surrogates from invalid UTF-8) is replaced with U+FFFD, never fatal.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainhub.jobs.models import Job, Task
from trainhub.telemetry import logchunks
from trainhub.telemetry.chunks import stored_points
from trainhub.telemetry.logchunks import CHUNK_LINES, LINE_ID_SHIFT, split_lines, stored_lines
from trainhub.telemetry.models import LogChunk
from trainhub.telemetry.results import coordinator_result
from trainhub.telemetry.selectors import log_lines, log_text, stderr_tail
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
    return [(x.offset, x.line) for x in stored_lines(LogChunk.objects.filter(task=task))]


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
                sent = split_lines(clean_text(x) for c in chunks if c[0] == to_ps for x in c[1])
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


def test_a_line_id_is_its_chunk_id_shifted_and_its_index_and_pages_within_chunks(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids grow with the lines; `after` any id, `tail` any count and a search give the
    same lines across chunks, read a few chunks at a time."""
    monkeypatch.setattr(logchunks, "READ_CHUNKS", 2)
    worker, ps = _task(job), _task(job, "ps", 0)
    sent = []
    for batch in range(5):
        task = ps if batch % 2 else worker
        lines = [f"{task.role} {batch}.{i} {'ERROR' if i == 1 else 'ok'}" for i in range(3)]
        ingest_logs(task=task, stream="stdout", lines=lines, now=NOW)
        sent += [(task.role, line) for line in lines]
    chunks = list(LogChunk.objects.order_by("id").values_list("id", "count"))
    assert [count for _, count in chunks] == [3] * 5
    everything = log_lines(job)
    assert [x["id"] for x in everything] == [
        (chunk << LINE_ID_SHIFT) + i for chunk, count in chunks for i in range(count)
    ]
    assert [x["line"] for x in everything] == [line for _, line in sent]
    for k, line in enumerate(everything):
        assert log_lines(job, after_id=line["id"]) == everything[k + 1 :]
        assert log_lines(job, after_id=line["id"], limit=4) == everything[k + 1 : k + 5]
        assert log_lines(job, tail=k + 1) == everything[-(k + 1) :]
    errors = [x for x in everything if "ERROR" in x["line"]]
    assert log_lines(job, search="error") == errors
    assert log_lines(job, search="error", tail=2) == errors[-2:]
    assert log_lines(job, search="error", after_id=errors[0]["id"]) == errors[1:]
    assert (
        log_lines(job, source="ps-0", tail=4) == [x for x in everything if "ps" in x["line"]][-4:]
    )
    download = b"".join(log_text(job.pk)).decode()
    assert download == "".join(f"[{role}-0] {line}\n" for role, line in sent)


def test_a_batch_over_a_chunk_is_split_and_the_next_offset_is_the_last_chunks_end(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = _task(job)
    ingest_logs(task=task, stream="stdout", lines=["é"] * (CHUNK_LINES + 1), now=NOW)
    monkeypatch.setattr(logchunks, "CHUNK_BYTES", 11)
    ingest_logs(task=task, stream="stderr", lines=["12345", "6789", "x", "y" * 20], now=NOW)
    chunks = list(
        LogChunk.objects.order_by("id").values_list("offset", "end_offset", "count", "lines")
    )
    first_end = 3 * CHUNK_LINES
    assert chunks == [
        (0, first_end, CHUNK_LINES, "\n".join(["é"] * CHUNK_LINES)),
        (first_end, first_end + 3, 1, "é"),
        (first_end + 3, first_end + 14, 2, "12345\n6789"),  # a third line: over 11 bytes
        (first_end + 14, first_end + 16, 1, "x"),
        (first_end + 16, first_end + 37, 1, "y" * 20),  # one line over it: a chunk alone
    ]
    stream = b"".join(log_text(job.pk, task.pk))
    assert stream == ("é\n" * (CHUNK_LINES + 1) + "12345\n6789\nx\n" + "y" * 20 + "\n").encode()
    assert _stored(task)[-4:] == [
        (first_end + 3, "12345"),
        (first_end + 9, "6789"),
        (first_end + 14, "x"),
        (first_end + 16, "y" * 20),
    ]


def test_the_stderr_tail_and_the_result_are_read_back_across_and_within_chunks(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logchunks, "READ_CHUNKS", 1)
    coordinator = _task(job, "coordinator", 0)
    ingest_logs(task=coordinator, stream="stderr", lines=["old 1", "old 2"], now=NOW)
    later = NOW + timedelta(minutes=1)
    ingest_logs(task=coordinator, stream="stderr", lines=["Traceback", "  at x"], now=later)
    ingest_logs(task=coordinator, stream="stdout", lines=["between"], now=later)
    ingest_logs(task=coordinator, stream="stderr", lines=["Error: y", "done"], now=later)
    assert stderr_tail(coordinator.pk, since=None, limit=3) == ["  at x", "Error: y", "done"]
    assert stderr_tail(coordinator.pk, since=later, limit=9) == [
        "Traceback",
        "  at x",
        "Error: y",
        "done",
    ]
    assert coordinator_result(job.pk) is None
    results = ['{"result": 1}', "printed after", '{"result": 2}', "the end"]
    ingest_logs(task=coordinator, stream="stdout", lines=results, now=later)
    ingest_logs(task=coordinator, stream="stdout", lines=["no result here"], now=later)
    assert coordinator_result(job.pk) == 2
