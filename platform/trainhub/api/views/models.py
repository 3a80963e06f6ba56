"""`/api/v1/jobs/{id}/model/` and `/api/v1/models/`: export, register and download models.

`GET jobs/{id}/model/` answers the zip of the job's newest registered version, or exports
one on demand (not registered); `POST` registers the next version of a name in the job's
team. `GET models/` lists the versions of your teams' models, `models/{id}/download/`
serves one. Jobs of other teams are 404, as on `jobs/{id}/`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import FileResponse
from django.utils import timezone
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trainhub.jobs.models import Job
from trainhub.registry.filters import ModelVersionFilter
from trainhub.registry.models import ModelVersion
from trainhub.registry.policies import can_register_model
from trainhub.registry.services import (
    ModelExportError,
    export_job_model,
    export_job_zip,
    model_file,
    model_root,
)

from ..errors import FIELD_ERRORS, Conflict, ErrorResponse, error_response
from ..serializers.models import ModelExportRequestSerializer, ModelVersionSerializer

ZIP = "application/zip"
NOT_EXPORTABLE = error_response("The job did not succeed, or has no committed checkpoint.")


def _zip_response(path: Path, filename: str, *, delete: bool = False) -> FileResponse:
    f = path.open("rb")
    if delete:
        path.unlink()  # the open file stays readable until the answer is sent
    return FileResponse(f, as_attachment=True, filename=filename, content_type=ZIP)


def _refused(exc: ModelExportError) -> Exception:
    if exc.field == "job":
        return Conflict(str(exc))
    return serializers.ValidationError({exc.field: [str(exc)]})


class JobModelView(APIView):
    """The model of one of your teams' jobs."""

    def _job(self, request: Request, pk: int) -> Job:
        jobs = Job.objects.visible_to(request.user).select_related("team")
        return get_object_or_404(jobs, pk=pk)

    @extend_schema(
        operation_id="jobs_model_download",
        responses={(200, ZIP): OpenApiResponse(OpenApiTypes.BINARY), 409: NOT_EXPORTABLE},
    )
    def get(self, request: Request, pk: int) -> FileResponse:
        """The job's newest registered model version, or a fresh (unregistered) export."""
        job = self._job(request, pk)
        registered = ModelVersion.objects.filter(job=job).order_by("-created_at", "-id").first()
        if registered is not None:
            path = model_file(registered)
            if not path.is_file():
                raise NotFound(f"The file of {registered} is missing from the model store.")
            return _zip_response(path, _filename(registered))
        root = model_root()
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".download-", suffix=".zip") as tmp:
            path = Path(tmp.name)
        try:
            export_job_zip(job=job, name=None, zip_path=path, now=timezone.now())
        except ModelExportError as exc:
            raise _refused(exc) from exc
        return _zip_response(path, f"job-{job.pk}-model.zip", delete=True)

    @extend_schema(
        operation_id="jobs_model_register",
        request=ModelExportRequestSerializer,
        responses={
            201: ModelVersionSerializer,
            400: FIELD_ERRORS,
            403: ErrorResponse,
            409: NOT_EXPORTABLE,
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        """Export the job's model and register it as the next version of `name`."""
        job = self._job(request, pk)
        if not can_register_model(request.user, job):
            raise PermissionDenied("Viewers cannot register models.")
        params = ModelExportRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        user = request.user
        assert isinstance(user, User)  # IsAuthenticated
        try:
            version = export_job_model(
                job=job, user=user, name=params.validated_data["name"], now=timezone.now()
            )
        except ModelExportError as exc:
            raise _refused(exc) from exc
        body = ModelVersionSerializer(version, context={"request": request}).data
        return Response(body, status=status.HTTP_201_CREATED)


class ModelVersionViewSet(viewsets.ReadOnlyModelViewSet):
    """Registered model versions of the teams you belong to (newest first per name)."""

    serializer_class = ModelVersionSerializer
    queryset = ModelVersion.objects.none()  # for schema generation; requests use get_queryset
    filter_backends = [DjangoFilterBackend]
    filterset_class = ModelVersionFilter

    def get_queryset(self) -> QuerySet[ModelVersion]:
        return (
            ModelVersion.objects.visible_to(self.request.user)
            .select_related("team", "created_by")
            .order_by("team__slug", "name", "-version")
        )

    @extend_schema(responses={(200, ZIP): OpenApiResponse(OpenApiTypes.BINARY)})
    @action(detail=True, methods=["get"], filter_backends=[])
    def download(self, request: Request, pk: str | None = None) -> FileResponse:
        """The version's zip (manifest.json and tables.npz; `ps_runtime.load_model` reads it)."""
        version = self.get_object()
        path = model_file(version)
        if not path.is_file():
            raise NotFound(f"The file of {version} is missing from the model store.")
        return _zip_response(path, _filename(version))


def _filename(version: ModelVersion) -> str:
    return f"{version.team.slug}-{version.name}-v{version.version}.zip"
