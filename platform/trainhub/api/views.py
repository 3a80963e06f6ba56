"""User-facing REST API views: thin, each calls one service or selector."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import Prefetch, QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trainhub.jobs.models import Job, Task
from trainhub.jobs.services import JobStateError, cancel_job, submit_job
from trainhub.jobs.spec import JobSpecSerializer
from trainhub.nodes.models import Node
from trainhub.nodes.services import create_enrollment_token
from trainhub.telemetry.selectors import log_lines, metric_series
from trainhub.tenancy.models import Team

from .policies import can_cancel
from .serializers import (
    EnrollmentTokenRequestSerializer,
    IssuedEnrollmentTokenSerializer,
    JobEventSerializer,
    JobSerializer,
    NodeSerializer,
    TeamSerializer,
)

MetricsResponse = inline_serializer(
    "MetricSeries",
    {
        "series": serializers.DictField(
            child=serializers.ListField(
                child=inline_serializer(
                    "MetricPoint",
                    {
                        "step": serializers.IntegerField(),
                        "value": serializers.FloatField(),
                        "time": serializers.DateTimeField(),
                    },
                )
            )
        )
    },
)


class JobViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Training jobs of the teams you belong to."""

    serializer_class = JobSerializer
    queryset = Job.objects.none()  # for schema generation; requests use get_queryset

    def get_queryset(self) -> QuerySet[Job]:
        return (
            Job.objects.visible_to(self.request.user)
            .select_related("team", "submitted_by")
            .prefetch_related(Prefetch("tasks", queryset=Task.objects.select_related("node")))
        )

    @extend_schema(request=JobSpecSerializer, responses={201: JobSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        spec = JobSpecSerializer(data=request.data, context={"request": request})
        spec.is_valid(raise_exception=True)
        job = submit_job(user=_user(request), spec=_plain(spec.validated_data), now=timezone.now())
        body = JobSerializer(self.get_queryset().get(pk=job.pk), context={"request": request})
        return Response(body.data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        if not can_cancel(request.user, job):
            raise PermissionDenied("Viewers cannot cancel jobs.")
        try:
            cancel_job(job=job, actor=str(request.user), now=timezone.now())
        except JobStateError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(
            JobSerializer(self.get_queryset().get(pk=job.pk), context={"request": request}).data
        )

    @extend_schema(
        parameters=[OpenApiParameter("name", str, many=True, description="Only these metrics")],
        responses={200: MetricsResponse},
    )
    @action(detail=True, methods=["get"])
    def metrics(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        return Response({"series": metric_series(job, request.query_params.getlist("name"))})

    @extend_schema(responses={200: JobEventSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        return Response(JobEventSerializer(job.events.all(), many=True).data)

    @extend_schema(
        parameters=[OpenApiParameter("after", int, description="Only lines after this id")],
        responses={
            200: inline_serializer(
                "LogPage", {"lines": serializers.ListField(child=serializers.DictField())}
            )
        },
    )
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        after = request.query_params.get("after", "0")
        if not after.isdigit():
            raise serializers.ValidationError({"after": ["Expected a non-negative integer."]})
        return Response({"lines": log_lines(job, after_id=int(after))})


def _user(request: Request) -> User:
    """The signed-in user (the view's permissions have already refused anonymous callers)."""
    assert isinstance(request.user, User)
    return request.user


def _plain(data: Any) -> Any:
    """Validated data as plain dicts and lists, for a JSONField."""
    if isinstance(data, dict):
        return {k: _plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v) for v in data]
    return data


class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = TeamSerializer
    lookup_field = "slug"
    queryset = Team.objects.none()  # for schema generation; requests use get_queryset

    def get_queryset(self) -> QuerySet[Team]:
        return Team.objects.visible_to(self.request.user)


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = NodeSerializer
    queryset = Node.objects.all()


class EnrollmentTokenView(APIView):
    """Platform admins create tokens that let agents enroll nodes."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        request=EnrollmentTokenRequestSerializer, responses={201: IssuedEnrollmentTokenSerializer}
    )
    def post(self, request: Request) -> Response:
        params = EnrollmentTokenRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        issued = create_enrollment_token(created_by=_user(request), **params.validated_data)
        return Response({"id": issued.id, "token": issued.secret}, status=status.HTTP_201_CREATED)
