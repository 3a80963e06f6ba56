"""`/api/v1/jobs/`: submit, list, inspect, cancel, scale and clone training jobs."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import Prefetch, QuerySet
from django.utils import timezone
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from trainhub.jobs.filters import JobFilter
from trainhub.jobs.models import Job, Task
from trainhub.jobs.policies import can_cancel, can_clone, can_scale
from trainhub.jobs.services import (
    JobStateError,
    PriorityCapExceeded,
    ScaleError,
    cancel_job,
    clone_job,
    scale_job,
    submit_job,
)
from trainhub.jobs.spec import JobSpecSerializer, parse_job_spec
from trainhub.scheduling.preview import Preview, preview_submission
from trainhub.tenancy.models import Team
from trainhub.tenancy.policies import can_submit, can_view_team

from ..errors import Conflict, ErrorResponse
from ..serializers.jobs import (
    CloneRequestSerializer,
    JobEventSerializer,
    JobSerializer,
    ScaleRequestSerializer,
)
from ..throttles import SubmissionRateThrottle
from .job_telemetry import JobTelemetryMixin


class SubmitPreview(serializers.Serializer[Preview]):
    """What `POST jobs/?dry_run=true` answers (`scheduling.preview.Preview`)."""

    fits_now = serializers.BooleanField(help_text="The next scheduling cycle would start it.")
    position = serializers.IntegerField(help_text="Where it would stand in the queue (1 = first).")
    reason = serializers.CharField(help_text="Why it would wait; empty when it fits now.")
    estimated_start = serializers.DateTimeField(
        allow_null=True, help_text="When it would start; null when that is unknown."
    )


class JobViewSet(mixins.CreateModelMixin, JobTelemetryMixin, viewsets.ReadOnlyModelViewSet):
    """Training jobs of the teams you belong to."""

    serializer_class = JobSerializer
    queryset = Job.objects.none()  # for schema generation; requests use get_queryset
    filter_backends = [DjangoFilterBackend]
    filterset_class = JobFilter

    def get_queryset(self) -> QuerySet[Job]:
        return (
            Job.objects.visible_to(self.request.user)
            .select_related("team", "submitted_by")
            .prefetch_related(Prefetch("tasks", queryset=Task.objects.select_related("node")))
        )

    def get_throttles(self) -> list[BaseThrottle]:
        if self.action in ("create", "clone"):
            return [SubmissionRateThrottle()]
        return super().get_throttles()

    def _body(self, job: Job, request: Request) -> Any:
        return JobSerializer(self.get_queryset().get(pk=job.pk), context={"request": request}).data

    @extend_schema(
        request=JobSpecSerializer,
        parameters=[
            OpenApiParameter(
                "dry_run",
                bool,
                description="Validate and preview only: answers whether the job would start "
                "now (200, SubmitPreview) and creates nothing.",
            )
        ],
        responses={
            200: OpenApiResponse(SubmitPreview, description="With dry_run=true."),
            201: JobSerializer,
            403: ErrorResponse,
            409: OpenApiResponse(ErrorResponse, description="A priority cap has no room now."),
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        _refuse_viewers(request)
        user = _user(request)
        spec = parse_job_spec(request.data, user=user)
        if _dry_run(request):
            try:
                preview = preview_submission(spec, now=timezone.now())
            except PriorityCapExceeded as exc:
                return _cap_response(exc)
            return Response(SubmitPreview(preview).data)
        try:
            job = submit_job(user=user, spec=spec, now=timezone.now())
        except PriorityCapExceeded as exc:
            return _cap_response(exc)
        return Response(self._body(job, request), status=status.HTTP_201_CREATED)

    @extend_schema(
        request=None, responses={200: JobSerializer, 403: ErrorResponse, 409: ErrorResponse}
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        if not can_cancel(request.user, job):
            raise PermissionDenied("Viewers cannot cancel jobs.")
        try:
            cancel_job(job=job, actor=str(request.user), now=timezone.now())
        except JobStateError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(self._body(job, request))

    @extend_schema(
        request=ScaleRequestSerializer,
        responses={
            200: JobSerializer,
            403: ErrorResponse,
            409: OpenApiResponse(
                ErrorResponse,
                description="The job is over, the count is outside its spec's workers.min "
                "and workers.max, or a priority cap has no room now.",
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def scale(self, request: Request, pk: str | None = None) -> Response:
        """Set how many workers the job should run, within its spec's min and max."""
        job = self.get_object()
        if not can_scale(request.user, job):
            raise PermissionDenied("Viewers cannot scale jobs.")
        params = ScaleRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            scale_job(
                job=job,
                workers=params.validated_data["workers"],
                actor=str(request.user),
                now=timezone.now(),
            )
        except ScaleError as exc:
            raise Conflict(str(exc)) from exc
        except JobStateError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        except PriorityCapExceeded as exc:
            return _cap_response(exc)
        return Response(self._body(job, request))

    @extend_schema(
        request=CloneRequestSerializer,
        responses={201: JobSerializer, 403: ErrorResponse, 409: ErrorResponse},
    )
    @action(detail=True, methods=["post"])
    def clone(self, request: Request, pk: str | None = None) -> Response:
        """Submit a new job with this job's spec (optionally under a new name)."""
        job = self.get_object()
        if not can_clone(request.user, job):
            raise PermissionDenied("Viewers cannot submit jobs.")
        params = CloneRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        user = _user(request)
        spec = parse_job_spec({**job.spec, **params.validated_data}, user=user)
        try:
            new = clone_job(job=job, user=user, spec=spec, now=timezone.now())
        except PriorityCapExceeded as exc:
            return _cap_response(exc)
        return Response(self._body(new, request), status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: JobEventSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def events(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        return Response(JobEventSerializer(job.events.all(), many=True).data)


def _dry_run(request: Request) -> bool:
    value = request.query_params.get("dry_run", "false")
    try:
        return bool(serializers.BooleanField().to_internal_value(value))
    except serializers.ValidationError:
        raise serializers.ValidationError({"dry_run": ["Expected true or false."]}) from None


def _refuse_viewers(request: Request) -> None:
    """403 for a viewer submitting to their team (non-members get the spec's 400)."""
    slug = request.data.get("team") if isinstance(request.data, dict) else None
    if not isinstance(slug, str):
        return
    team = Team.objects.filter(slug=slug).first()
    if (
        team is not None
        and can_view_team(request.user, team)
        and not can_submit(request.user, team)
    ):
        raise PermissionDenied(f"Viewers of team '{slug}' cannot submit jobs.")


def _cap_response(exc: PriorityCapExceeded) -> Response:
    if exc.impossible:
        raise serializers.ValidationError({"priority": [str(exc)]})
    return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)


def _user(request: Request) -> User:
    """The signed-in user (the view's permissions have already refused anonymous callers)."""
    assert isinstance(request.user, User)
    return request.user
