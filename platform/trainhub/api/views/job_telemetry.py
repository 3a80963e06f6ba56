"""`/api/v1/jobs/{id}/metrics/`, `logs/` and `logs/download/`: what a job reported.

A mixin of `JobViewSet` (jobs.py): the job comes from its `get_object`, so another team's
job is a 404 here as everywhere.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.core.validators import RegexValidator
from django.http import StreamingHttpResponse
from django.utils.cache import patch_vary_headers
from django.utils.decorators import method_decorator
from django.views.decorators.gzip import gzip_page
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from trainhub.jobs.models import Job
from trainhub.telemetry.selectors import (
    alog_text,
    budget_counts,
    log_lines,
    log_text,
    metric_buckets,
    metric_clock,
    metric_series,
)

BIGINT = 2**63 - 1
NAME_MAX = 100


class MetricsQuery(serializers.Serializer[Any]):
    """The query of `metrics/`: which series, how many points, which steps."""

    max_points = serializers.IntegerField(
        min_value=10,
        max_value=5000,
        required=False,
        help_text="Downsample: at most this many buckets per series, each with its last "
        "point, min, max and count. Without it, every raw point.",
    )
    name = serializers.ListField(
        child=serializers.CharField(max_length=NAME_MAX, trim_whitespace=False, allow_blank=True),
        required=False,
        help_text="Only these metrics.",
    )
    # The pattern puts the length limit of each name in the schema too.
    series = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text=f"Only these metrics, comma-separated (each at most {NAME_MAX} characters).",
        validators=[
            RegexValidator(
                # One name, or several with commas; not "" (the schema's other branch).
                rf"^(?:[^,\x00]{{1,{NAME_MAX}}}|[^,\x00]{{0,{NAME_MAX}}}(?:,[^,\x00]{{0,{NAME_MAX}}})+)$",
                f"Metric names have at most {NAME_MAX} characters.",
            )
        ],
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # `from` is a Python keyword: declared here rather than as an attribute.
        fields["from"] = serializers.IntegerField(
            required=False,
            min_value=-BIGINT - 1,
            max_value=BIGINT,
            help_text="First step.",
        )
        fields["to"] = serializers.IntegerField(
            required=False,
            min_value=-BIGINT - 1,
            max_value=BIGINT,
            help_text="Last step; below `from`, the range is empty.",
        )
        return fields

    def validate_series(self, value: str) -> list[str]:
        return [n for n in value.split(",") if n]


class ClockQuery(serializers.Serializer[Any]):
    """The query of `metrics/clock/`."""

    max_points = serializers.IntegerField(
        min_value=10,
        max_value=5000,
        required=False,
        default=1000,
        help_text="Cut the job's steps into at most this many ranges (two pairs each).",
    )


class DownloadQuery(serializers.Serializer[Any]):
    """The query of `logs/download/`: the whole job, or one task's stream."""

    task = serializers.IntegerField(
        required=False, min_value=1, max_value=BIGINT, help_text="Only this task's lines (its id)."
    )


class LogsQuery(DownloadQuery):
    """The query of `logs/`: which lines."""

    after = serializers.IntegerField(
        required=False, min_value=0, max_value=BIGINT, help_text="Only lines after this id."
    )
    tail = serializers.IntegerField(
        required=False, min_value=1, max_value=10000, help_text="The last N matching lines."
    )
    q = serializers.CharField(
        required=False,
        max_length=200,
        allow_blank=True,
        trim_whitespace=False,
        help_text="Only lines containing this text, any case (empty: all).",
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # `source` is an attribute of every serializer field: declared here instead.
        fields["source"] = serializers.CharField(
            required=False,
            allow_blank=True,
            max_length=40,
            help_text="Only this task's lines, e.g. worker-0 (empty: all).",
        )
        return fields


_ACCEPTS_GZIP = re.compile(r"\bgzip\b")


def _gzip(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """`chunks` as one gzip stream (Django's async gzip would send one member per chunk,
    which some clients read only the first of)."""
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)
    for chunk in chunks:
        if packed := packer.compress(chunk):
            yield packed
    yield packer.flush()


async def _agzip(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)
    async for chunk in chunks:
        if packed := packer.compress(chunk):
            yield packed
    yield packer.flush()


class PlainTextRenderer(BaseRenderer):
    """Lets `Accept: text/plain` through content negotiation for the log download."""

    media_type = "text/plain"
    format = "txt"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        if isinstance(data, dict) and "detail" in data:
            return str(data["detail"]).encode()
        return str(data).encode()


MetricsResponse = inline_serializer(
    "MetricSeries",
    {
        "downsampled": serializers.BooleanField(
            required=False,
            help_text="With max_points: whether some bucket holds more than one point.",
        ),
        "series": serializers.DictField(
            child=serializers.ListField(
                child=inline_serializer(
                    "MetricEntry",
                    {
                        "step": serializers.IntegerField(),
                        "value": serializers.FloatField(),
                        "time": serializers.DateTimeField(required=False),
                        "min": serializers.FloatField(required=False),
                        "max": serializers.FloatField(required=False),
                        "count": serializers.IntegerField(required=False),
                    },
                )
            ),
            help_text="Without max_points: every point {step, value, time}. With it: "
            "buckets {step, value, min, max, count}.",
        ),
        "points_dropped": serializers.IntegerField(
            help_text="Points not stored: reported beyond the job's budget of points."
        ),
        "purged_at": serializers.DateTimeField(
            allow_null=True,
            help_text="When retention deleted the raw points (only rollups are read since).",
        ),
    },
)
LogLineSchema = inline_serializer(
    "LogLine",
    {
        "id": serializers.IntegerField(
            help_text="The line's cursor, for `after`: grows with the lines (its chunk's id "
            "* 2**16 + its index in the chunk)."
        ),
        "task": serializers.IntegerField(allow_null=True),
        "source": serializers.CharField(),
        "stream": serializers.CharField(),
        "offset": serializers.IntegerField(help_text="Byte offset in the task's stream."),
        "line": serializers.CharField(),
        "time": serializers.DateTimeField(),
    },
)


class JobTelemetryMixin(viewsets.GenericViewSet):
    """The `metrics`, `logs` and `logs/download` actions of a job."""

    def _job(self) -> Job:
        """The job of the URL if the user may see it (else 404), without its tasks."""
        job = get_object_or_404(
            Job.objects.visible_to(self.request.user).select_related("telemetry"),
            pk=self.kwargs["pk"],
        )
        self.check_object_permissions(self.request, job)
        return job

    @extend_schema(
        parameters=[MetricsQuery],
        responses={200: MetricsResponse},
    )
    @action(detail=True, methods=["get"], filter_backends=[])
    @method_decorator(gzip_page)  # floats compress about 2.5x; the charts ask on every load
    def metrics(self, request: Request, pk: str | None = None) -> Response:
        job = self._job()
        query = MetricsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        names = [*params.get("name", []), *params.get("series", [])]
        counts = budget_counts(job)
        extra = {"points_dropped": counts["points_dropped"], "purged_at": counts["purged_at"]}
        start, end = params.get("from"), params.get("to")
        if "max_points" not in params:
            return Response({"series": metric_series(job, names, start=start, end=end), **extra})
        if start is not None and end is not None and end < start:
            return Response({"downsampled": False, "series": {}, **extra})
        body = metric_buckets(
            job, max_points=params["max_points"], names=names, start=start, end=end
        )
        return Response({**body, **extra})

    @extend_schema(
        parameters=[ClockQuery],
        responses={
            200: inline_serializer(
                "MetricClock",
                {
                    "clock": serializers.ListField(
                        child=inline_serializer(
                            "ClockEntry",
                            {
                                "step": serializers.IntegerField(),
                                "time": serializers.DateTimeField(),
                            },
                        ),
                        help_text="When the job reached its steps, ascending by step: each "
                        "range of steps' first step with its earliest time and last step with "
                        "its latest. Empty once retention deleted the raw points.",
                    ),
                    "purged_at": serializers.DateTimeField(allow_null=True),
                },
            )
        },
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="metrics/clock",
        url_name="metrics-clock",
        filter_backends=[],
    )
    def metrics_clock(self, request: Request, pk: str | None = None) -> Response:
        """Step to wall-clock time, for charts drawn over time (the Compare page's x axis)."""
        job = self._job()
        query = ClockQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        clock = metric_clock(job, max_points=query.validated_data["max_points"])
        return Response({"clock": clock, "purged_at": budget_counts(job)["purged_at"]})

    @extend_schema(
        parameters=[LogsQuery],
        responses={
            200: inline_serializer(
                "LogPage",
                {
                    "lines": serializers.ListField(child=LogLineSchema),
                    "log_lines_dropped": serializers.IntegerField(
                        help_text="Lines not stored: beyond the job's log budget."
                    ),
                    "log_bytes_dropped": serializers.IntegerField(),
                    "purged_at": serializers.DateTimeField(
                        allow_null=True, help_text="When retention deleted the log lines."
                    ),
                },
            ),
        },
    )
    @action(detail=True, methods=["get"], filter_backends=[])
    def logs(self, request: Request, pk: str | None = None) -> Response:
        """Lines in id order: the first 1000 after `after`, or with `tail` the last N."""
        job = self._job()
        query = LogsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        lines = log_lines(
            job,
            after_id=params.get("after", 0),
            tail=params.get("tail"),
            search=params.get("q", ""),
            source=params.get("source", ""),
            task_id=params.get("task"),
        )
        counts = budget_counts(job)
        del counts["points_dropped"]
        return Response({"lines": lines, **counts})

    @extend_schema(
        parameters=[DownloadQuery],
        responses={
            (200, "text/plain"): OpenApiResponse(
                OpenApiTypes.STR,
                description="The whole log, one `[source] line` per line; with `task`, "
                "that task's lines as stored. Gzip-encoded when the client accepts it.",
            ),
        },
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="logs/download",
        url_name="logs-download",
        filter_backends=[],
        renderer_classes=[JSONRenderer, PlainTextRenderer],
    )
    def logs_download(self, request: Request, pk: str | None = None) -> StreamingHttpResponse:
        """The whole log as a text file, streamed a chunk of lines at a time."""
        job = self._job()
        query = DownloadQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        task_id = query.validated_data.get("task")
        gzipped = bool(_ACCEPTS_GZIP.search(request.headers.get("Accept-Encoding", "")))
        # An ASGI server reads a sync iterator whole before sending it; give it an async one.
        chunks: Any
        if isinstance(request._request, ASGIRequest):
            chunks = alog_text(job.pk, task_id)
            chunks = _agzip(chunks) if gzipped else chunks
        else:
            chunks = log_text(job.pk, task_id)
            chunks = _gzip(chunks) if gzipped else chunks
        response = StreamingHttpResponse(chunks, content_type="text/plain; charset=utf-8")
        name = f"job-{job.pk}" if task_id is None else f"job-{job.pk}-task-{task_id}"
        response["Content-Disposition"] = f'attachment; filename="{name}.log"'
        patch_vary_headers(response, ["Accept-Encoding"])
        if gzipped:
            response["Content-Encoding"] = "gzip"
        return response
