"""Log lines stored as chunks: one `LogChunk` row per stored batch of a task's stream.

A chunk holds consecutive lines of one task and stream (at most `CHUNK_LINES` lines and,
past its first line, `CHUNK_BYTES` bytes), joined with newlines in one text column:
PostgreSQL compresses long text by itself (TOAST), and `lines ILIKE %s` still pre-selects
the chunks a search reads. A stored line holds no newline (`split_lines`).

A line's id, the cursor the API (`?after=`), the live feed and the job page hand out, is
`chunk id * 2**LINE_ID_SHIFT + its index in the chunk`: ids grow with the lines, and the
lines after id `n` are in the chunks of id `n >> LINE_ID_SHIFT` and up. Readers go
through the chunks `READ_CHUNKS` at a time (`iter_lines`), never a whole job at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import QuerySet

from .models import LogChunk

# A line's id is its chunk's id shifted left by this, plus its index in the chunk (ids
# stay below 2**53, exact in a browser, up to 2**37 chunks).
LINE_ID_SHIFT = 16
CHUNK_LINES = 4096
CHUNK_BYTES = 256 * 1024
# Chunks read per query: at most READ_CHUNKS * CHUNK_BYTES (plus one line each) of text.
READ_CHUNKS = 32

assert CHUNK_LINES < 1 << LINE_ID_SHIFT


class Line(NamedTuple):
    """One stored line as the readers return it."""

    id: int
    task: int | None
    source: str
    stream: str
    offset: int
    line: str
    time: datetime

    def as_dict(self) -> dict[str, Any]:
        """The line as the API and the live feed give it."""
        return {**self._asdict(), "time": self.time.isoformat()}


def line_id(chunk_id: int, index: int) -> int:
    """The id of line `index` of chunk `chunk_id`."""
    return (chunk_id << LINE_ID_SHIFT) + index


def split_lines(texts: Iterable[str]) -> list[str]:
    """Reported lines as stored lines: one holding newlines is the lines it holds (the
    stream's bytes are the same either way)."""
    return [part for text in texts for part in text.split("\n")]


def _parts(texts: list[str], sizes: list[int]) -> Iterator[tuple[list[str], int]]:
    """`texts` cut into chunks' lines, with their bytes (`sizes`: each line's, newline
    included)."""
    start, used = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= CHUNK_LINES or used + size > CHUNK_BYTES):
            yield texts[start:i], used
            start, used = i, 0
        used += size
    if start < len(texts):
        yield texts[start:], used


def store_lines(
    *,
    job_id: int,
    task_id: int | None,
    source: str,
    stream: str,
    texts: list[str],
    time: datetime,
    offset: int | None = None,
) -> list[Line]:
    """Store `texts` (lines holding no newline) as chunks of the task's stream starting at
    byte `offset` (default: where the task's stream ends); returns the stored lines. No
    budget is charged: `services.ingest_logs` does that (tests and tools call this)."""
    if not texts:
        return []
    if offset is None:
        offset = next_offset(task_id)
    sizes = [len(text.encode()) + 1 for text in texts]
    chunks = []
    for part, size in _parts(texts, sizes):
        chunks.append(
            LogChunk(
                job_id=job_id,
                task_id=task_id,
                source=source,
                stream=stream[:8],
                offset=offset,
                end_offset=offset + size,
                count=len(part),
                time=time,
                lines="\n".join(part),
            )
        )
        offset += size
    LogChunk.objects.bulk_create(chunks)  # sets the ids (PostgreSQL and SQLite RETURNING)
    return [line for chunk in chunks for line in lines_of(chunk)]


def next_offset(task_id: int | None) -> int:
    """Where the task's next line starts: its last chunk's end (0 if none). One read of
    the (task, id) index."""
    if task_id is None:
        return 0
    last = LogChunk.objects.filter(task_id=task_id).order_by("-id").values_list("end_offset")
    found = last.first()
    return 0 if found is None else found[0]


def lines_of(chunk: LogChunk) -> list[Line]:
    """The chunk's lines with their ids and offsets."""
    lines, offset = [], chunk.offset
    for index, text in enumerate(chunk.lines.split("\n")):
        lines.append(
            Line(
                line_id(chunk.pk, index),
                chunk.task_id,
                chunk.source,
                chunk.stream,
                offset,
                text,
                chunk.time,
            )
        )
        offset += len(text.encode()) + 1
    return lines


def iter_chunks(
    chunks: QuerySet[LogChunk], *, after_id: int = 0, descending: bool = False
) -> Iterator[LogChunk]:
    """The chunks of `chunks` that may hold lines after line `after_id`, in id order (or
    the reverse), read `READ_CHUNKS` at a time."""
    rows = chunks.filter(id__gte=after_id >> LINE_ID_SHIFT)
    order = "-id" if descending else "id"
    bound: dict[str, int] = {}
    while True:
        batch = list(rows.filter(**bound).order_by(order)[:READ_CHUNKS])
        yield from batch
        if len(batch) < READ_CHUNKS:
            return
        bound = {"id__lt" if descending else "id__gt": batch[-1].pk}


def iter_lines(
    chunks: QuerySet[LogChunk], *, after_id: int = 0, descending: bool = False
) -> Iterator[Line]:
    """The lines of `chunks` after line `after_id`, in id order (or the reverse), read a
    bounded number of chunks at a time: stop iterating, and no more are read."""
    for chunk in iter_chunks(chunks, after_id=after_id, descending=descending):
        lines = lines_of(chunk)
        if descending:
            lines.reverse()
        for line in lines:
            if line.id > after_id:
                yield line


def stored_lines(chunks: QuerySet[LogChunk] | None = None) -> list[Line]:
    """Every line of `chunks` (default: all), in id order: for tools, tests and checks."""
    found = LogChunk.objects.all() if chunks is None else chunks
    return list(iter_lines(found))
