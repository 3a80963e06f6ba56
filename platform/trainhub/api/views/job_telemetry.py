"""`/api/v1/jobs/{id}/metrics/`, `logs/` and `logs/download/`: what a job reported.

A mixin of `JobViewSet` (jobs.py): the job comes from its `get_object`, so another team's
job is a 404 here as everywhere.
"""

from __future__ import annotations

from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.gzip import gzip_page
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
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
    log_lines,
    log_text,
    metric_buckets,
    metric_series,
)

BIGINT = 2**63 - 1
NAME_MAX = 100


class MetricsQuery(serializers.Serializer[Any]):
    """The query of `metrics/`: which series, how many points, which steps."""

    max_points = serializers.IntegerField(min_value=10, max_value=5000, required=False)
    name = serializers.ListField(
        child=serializers.CharField(max_length=NAME_MAX, trim_whitespace=False, allow_blank=True),
        required=False,
    )
    series = serializers.CharField(required=False, trim_whitespace=False)

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # `from` is a Python keyword: declared here rather than as an attribute.
        fields["from"] = serializers.IntegerField(
            required=False, min_value=-BIGINT - 1, max_value=BIGINT
        )
        fields["to"] = serializers.IntegerField(
            required=False, min_value=-BIGINT - 1, max_value=BIGINT
        )
        return fields

    def validate_series(self, value: str) -> list[str]:
        names = [n for n in value.split(",") if n]
        if any(len(n) > NAME_MAX for n in names):
            raise serializers.ValidationError(f"Metric names have at most {NAME_MAX} characters.")
        return names

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        start, end = attrs.get("from"), attrs.get("to")
        if start is not None and end is not None and end < start:
            raise serializers.ValidationError({"to": ["Must not be less than `from`."]})
        if ("from" in attrs or "to" in attrs) and "max_points" not in attrs:
            raise serializers.ValidationError(
                {"max_points": ["Required with `from` or `to` (e.g. max_points=1000)."]}
            )
        return attrs


class LogsQuery(serializers.Serializer[Any]):
    """The query of `logs/`: which lines."""

    after = serializers.IntegerField(required=False, min_value=0, max_value=BIGINT)
    tail = serializers.IntegerField(required=False, min_value=1, max_value=10000)
    q = serializers.CharField(required=False, max_length=200, trim_whitespace=False)

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # `source` is an attribute of every serializer field: declared here instead.
        fields["source"] = serializers.CharField(required=False, max_length=40)
        return fields


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
    },
)
LogLineSchema = inline_serializer(
    "LogLine",
    {
        "id": serializers.IntegerField(),
        "source": serializers.CharField(),
        "stream": serializers.CharField(),
        "line": serializers.CharField(),
        "time": serializers.DateTimeField(),
    },
)
BadRequest = OpenApiResponse(
    inline_serializer("ParameterErrors", {"detail": serializers.CharField(required=False)}),
    description="A parameter is invalid; the body names it: {parameter: [message]}.",
)


class JobTelemetryMixin(viewsets.GenericViewSet):
    """The `metrics`, `logs` and `logs/download` actions of a job."""

    def _job(self) -> Job:
        """The job of the URL if the user may see it (else 404), without its tasks."""
        job = get_object_or_404(Job.objects.visible_to(self.request.user), pk=self.kwargs["pk"])
        self.check_object_permissions(self.request, job)
        return job

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "max_points",
                int,
                description="Downsample: at most this many buckets per series (10..5000), "
                "each with its last point, min, max and count. Without it, every raw point.",
            ),
            OpenApiParameter("name", str, many=True, description="Only these metrics"),
            OpenApiParameter("series", str, description="Only these metrics, comma-separated"),
            OpenApiParameter("from", int, description="First step (needs max_points)"),
            OpenApiParameter("to", int, description="Last step (needs max_points)"),
        ],
        responses={200: MetricsResponse, 400: BadRequest},
    )
    @action(detail=True, methods=["get"], filter_backends=[])
    @method_decorator(gzip_page)  # floats compress about 2.5x; the charts ask on every load
    def metrics(self, request: Request, pk: str | None = None) -> Response:
        job = self._job()
        query = MetricsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        names = [*params.get("name", []), *params.get("series", [])]
        if "max_points" not in params:
            return Response({"series": metric_series(job, names)})
        body = metric_buckets(
            job,
            max_points=params["max_points"],
            names=names,
            start=params.get("from"),
            end=params.get("to"),
        )
        return Response(body)

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="Only lines after this id"),
            OpenApiParameter("tail", int, description="The last N matching lines (1..10000)"),
            OpenApiParameter("q", str, description="Only lines containing this text, any case"),
            OpenApiParameter("source", str, description="Only this task's lines, e.g. worker-0"),
        ],
        responses={
            200: inline_serializer(
                "LogPage", {"lines": serializers.ListField(child=LogLineSchema)}
            ),
            400: BadRequest,
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
        )
        return Response({"lines": lines})

    @extend_schema(
        responses={
            (200, "text/plain"): OpenApiResponse(
                OpenApiTypes.STR, description="The whole log, one `[source] line` per line."
            )
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
        # An ASGI server reads a sync iterator whole before sending it; give it an async one.
        chunks: Any = (
            alog_text(job.pk) if isinstance(request._request, ASGIRequest) else log_text(job.pk)
        )
        response = StreamingHttpResponse(chunks, content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="job-{job.pk}.log"'
        return response
