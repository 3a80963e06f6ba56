"""The server side of the data stream: one client's data calls, multiplexed.

Each frame a client sends is one request (or one chunk of a chunked push). A reader
thread per stream takes them off the wire and hands each request to a pool shared by
all streams, which runs the same servicer method the unary call would run, with a
`FrameContext` in place of gRPC's: the stream's metadata with the frame's shard, and
`abort` failing that request only. Answers go back tagged with the request's id, in
the order they are ready.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import grpc

from ps_runtime.proto import ps_pb2
from ps_runtime.shards.replicas import SHARD_KEY, shard_metadata
from ps_runtime.wire import chunks
from ps_runtime.wire.frames import Frame, decode_frame, encode_frame, tensor_parts

log = logging.getLogger(__name__)

METHOD = "DataStream"
# Clients with a data stream open to one server at once (threads start as they come):
# a job's workers, its coordinator and their evaluators.
MAX_CLIENTS = 512
# Answers ready but not yet on the wire, per stream: a chunked pull waits for room
# (back-pressure) instead of copying the whole value ahead of the network.
ANSWERS_QUEUED = 8
_REQUESTS: dict[str, Any] = {
    "PullDense": ps_pb2.PullDenseRequest,
    "PushDenseGrad": ps_pb2.PushDenseRequest,
    "PullRows": ps_pb2.PullRowsRequest,
    "PushRowGrads": ps_pb2.PushRowsRequest,
    "PullDenseStream": ps_pb2.PullDenseRequest,
}
CHUNKED_PUSH = "PushDenseStream"
DATA_METHODS = frozenset(_REQUESTS) | {CHUNKED_PUSH}


class Aborted(Exception):
    """A request on the stream failed with `code` (what `context.abort` raised unary)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class FrameContext:
    """What a servicer method sees of one request on the stream."""

    def __init__(self, metadata: tuple[tuple[str, str], ...], shard: int) -> None:
        self._metadata = tuple(m for m in metadata if m[0] != SHARD_KEY) + shard_metadata(shard)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


class DataStreams:
    """Serves data streams for one servicer, on `workers` threads shared by all."""

    def __init__(self, servicer: Any, workers: int) -> None:
        self._servicer = servicer
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="ps-data")
        self._stopping = threading.Event()

    def stop(self) -> None:
        """The server is stopping: a request not started yet fails UNAVAILABLE, as a new
        call would, and each stream ends once the requests running on it are answered
        (the client then opens its next stream elsewhere, or fails over)."""
        self._stopping.set()

    def serve(self, request_iterator: Iterator[bytes], context: Any) -> Iterator[bytes]:
        """The stream handler: answers as they are ready, until the client closes its side."""
        answers: queue.Queue[bytes | None] = queue.Queue(ANSWERS_QUEUED)
        done = threading.Event()  # set when this stream is over (ended or cancelled)
        running: set[Future[None]] = set()  # its requests being answered
        metadata = tuple((str(k), str(v)) for k, v in context.invocation_metadata() or ())

        def put(message: bytes | None) -> None:
            while not done.is_set():
                try:
                    answers.put(message, timeout=0.5)
                    return
                except queue.Full:
                    continue

        reader = threading.Thread(
            target=self._read,
            args=(request_iterator, metadata, put, running),
            name="ps-data-reader",
            daemon=True,
        )
        reader.start()
        try:
            while True:
                try:
                    message = answers.get(timeout=0.2)
                except queue.Empty:
                    if self._stopping.is_set() and all(f.done() for f in list(running)):
                        return  # ends the stream: its client's later requests go elsewhere
                    continue
                if message is None:
                    return
                yield message
        finally:
            done.set()

    def _read(
        self,
        requests: Iterator[bytes],
        metadata: tuple[tuple[str, str], ...],
        put: Callable[[bytes | None], None],
        pending: set[Future[None]],
    ) -> None:
        pushes: dict[int, queue.SimpleQueue[chunks.PushChunk | None]] = {}
        try:
            for message in requests:
                frame = decode_frame(message)
                pieces = pushes.get(frame.id)
                if pieces is None and self._stopping.is_set():
                    stopping = Aborted(grpc.StatusCode.UNAVAILABLE, "the server is stopping")
                    put(_failure(frame.id, stopping))
                    continue
                if pieces is None and frame.method == CHUNKED_PUSH:
                    pieces = pushes[frame.id] = queue.SimpleQueue()
                    pending.add(self._pool.submit(self._push, frame, metadata, pieces, put))
                elif pieces is None:
                    pending.add(self._pool.submit(self._answer, frame, metadata, put))
                if pieces is not None:
                    pieces.put(chunks.decode_push_chunk(frame.body))
                    if not frame.more:
                        pieces.put(None)
                        del pushes[frame.id]
                pending.difference_update([f for f in list(pending) if f.done()])
        except Exception as e:  # the client went away: cancelled or broken
            log.debug("data stream ended: %s", e)
        for pieces in pushes.values():
            pieces.put(None)  # a push cut short: its handler reports it incomplete
        wait(list(pending))
        put(None)

    def _answer(
        self, frame: Frame, metadata: tuple[tuple[str, str], ...], put: Callable[[bytes], None]
    ) -> None:
        context = FrameContext(metadata, frame.shard)
        servicer, method = self._servicer, frame.method
        try:
            if method not in _REQUESTS:
                raise Aborted(grpc.StatusCode.UNIMPLEMENTED, f"no data call {method!r}")
            request = _REQUESTS[method].FromString(frame.body)
            if method == "PullDenseStream":
                for message in servicer.pull_chunks(
                    request,
                    context,
                    lambda head, view, last: encode_frame(frame.id, (head, view), more=not last),
                ):
                    put(message)
                return
            if method == "PullDense":
                body = tensor_parts(servicer.pull_dense_value(request, context))
            elif method == "PullRows":
                body = tensor_parts(servicer.pull_rows_value(request, context))
            else:
                body = [getattr(servicer, method)(request, context).SerializeToString()]
            put(encode_frame(frame.id, body))
        except Exception as e:
            put(_failure(frame.id, e))

    def _push(
        self,
        frame: Frame,
        metadata: tuple[tuple[str, str], ...],
        pieces: queue.SimpleQueue[chunks.PushChunk | None],
        put: Callable[[bytes], None],
    ) -> None:
        ended = False

        def received() -> Iterator[chunks.PushChunk]:
            nonlocal ended
            while not ended:
                piece = pieces.get()
                ended = piece is None
                if piece is not None:
                    yield piece

        try:
            reply = self._servicer.PushDenseStream(received(), FrameContext(metadata, frame.shard))
            put(encode_frame(frame.id, [reply.SerializeToString()]))
        except Exception as e:
            put(_failure(frame.id, e))
        finally:
            for _ in received():  # a push refused early: drop the rest of its chunks
                pass


def _failure(id: int, error: Exception) -> bytes:
    """The answer for a request that raised `error`, as the unary call would fail."""
    if isinstance(error, Aborted):
        return encode_frame(id, code=error.code.value[0], error=error.details)
    log.exception("data call failed", exc_info=error)
    return encode_frame(
        id,
        code=grpc.StatusCode.UNKNOWN.value[0],
        error=f"Exception calling application: {error}",
    )


class StreamingServer:
    """A gRPC server whose `stop` first ends its data streams (they never end by
    themselves, so a stop would wait out its whole grace); the rest is the server's."""

    def __init__(self, server: grpc.Server, streams: DataStreams) -> None:
        self._server = server
        self._streams = streams

    def stop(self, grace: float | None) -> threading.Event:
        self._streams.stop()
        event: threading.Event = self._server.stop(grace)
        return event

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)
