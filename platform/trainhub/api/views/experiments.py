"""Experiments: hyperparameter searches whose trials are jobs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from trainhub.experiments.models import Experiment, Trial
from trainhub.experiments.selectors import experiment_curves
from trainhub.experiments.services import (
    ExperimentStateError,
    cancel_experiment,
    create_experiment,
    pause_experiment,
    resume_experiment,
)
from trainhub.experiments.spec import parse_experiment
from trainhub.jobs.services import PriorityCapExceeded
from trainhub.tenancy.policies import can_submit

from ..errors import ErrorResponse
from ..serializers.experiments import (
    CurvesSerializer,
    ExperimentSerializer,
    ExperimentSpecSerializer,
)
from ..throttles import SubmissionRateThrottle
from .jobs import _cap_response, _refuse_viewers, _user


class ExperimentViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Hyperparameter searches of the teams you belong to; each trial run is a job."""

    serializer_class = ExperimentSerializer
    queryset = Experiment.objects.none()  # for schema generation

    def get_queryset(self) -> QuerySet[Experiment]:
        trials = Trial.objects.order_by("number")
        return (
            Experiment.objects.visible_to(self.request.user)
            .select_related("team", "submitted_by", "best_trial")
            .prefetch_related(Prefetch("trials", queryset=trials))
        )

    def get_throttles(self) -> list[BaseThrottle]:
        if self.action == "create":
            return [SubmissionRateThrottle()]
        return super().get_throttles()

    def _body(self, experiment: Experiment, request: Request) -> Any:
        fresh = self.get_queryset().get(pk=experiment.pk)
        return ExperimentSerializer(fresh, context={"request": request}).data

    @extend_schema(
        description="A job spec (each trial's) plus a `search` block: method (random, grid, "
        "asha), metric, goal, params, max_trials, max_concurrent, budget, max_budget, "
        "min_budget, reduction_factor, max_failed_trials. Errors name the field.",
        request=ExperimentSpecSerializer,
        responses={
            201: ExperimentSerializer,
            403: ErrorResponse,
            409: OpenApiResponse(ErrorResponse, description="A priority cap has no room now."),
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        _refuse_viewers(request)
        user = _user(request)
        spec, search = parse_experiment(request.data, user=user)
        try:
            experiment = create_experiment(user=user, spec=spec, search=search, now=timezone.now())
        except PriorityCapExceeded as exc:
            return _cap_response(exc)
        return Response(self._body(experiment, request), status=status.HTTP_201_CREATED)

    def _change(self, request: Request, change: Callable[..., Experiment]) -> Response:
        experiment = self.get_object()
        if not can_submit(request.user, experiment.team):
            raise PermissionDenied("Viewers cannot change experiments.")
        try:
            change(experiment=experiment, actor=str(request.user), now=timezone.now())
        except ExperimentStateError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(self._body(experiment, request))

    @extend_schema(
        request=None,
        responses={200: ExperimentSerializer, 403: ErrorResponse, 409: ErrorResponse},
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        """Hold every running trial (a placed one saves a checkpoint and stops first)."""
        return self._change(request, pause_experiment)

    @extend_schema(
        request=None,
        responses={200: ExperimentSerializer, 403: ErrorResponse, 409: ErrorResponse},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """Release the held trials; the search goes on."""
        return self._change(request, resume_experiment)

    @extend_schema(
        request=None,
        responses={200: ExperimentSerializer, 403: ErrorResponse, 409: ErrorResponse},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel every unfinished trial and end the experiment."""
        return self._change(request, cancel_experiment)

    @extend_schema(responses={200: CurvesSerializer})
    @action(detail=True, methods=["get"])
    def curves(self, request: Request, pk: str | None = None) -> Response:
        """Every trial's metric over its budget, for one chart."""
        return Response(experiment_curves(self.get_object()))
