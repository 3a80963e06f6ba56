"""`/api/v1/code/`: users upload code archives; a job's tasks fetch their job's archive.

`POST code/` (multipart field `file`, optional `team`) answers `{"digest", "size"}`, the
same for every upload of the same bytes. `GET code/<digest>/` is for agents only,
authenticated as one job (`Authorization: Job <job id>:<job token>`), and serves only
that job's archive.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.http import FileResponse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import authentication, exceptions, serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ps_runtime.archives import UnsafeArchive, is_digest
from trainhub.jobs.choices import JOB_TERMINAL
from trainhub.jobs.codearchives import (
    CodeArchiveTooLarge,
    code_path,
    max_bytes,
    store_code_archive,
)
from trainhub.jobs.models import Job
from trainhub.tenancy.models import Team
from trainhub.tenancy.policies import can_submit, is_platform_admin

JOB_SCHEME = "Job"
# A job id: ASCII digits only (str.isdigit() and int() also take Arabic-Indic and
# fullwidth digits, and int() fails on superscripts), short enough for a bigint.
_JOB_ID = re.compile(r"[0-9]{1,18}")
# Multipart framing around the file: a request this much over the limit is refused unread.
_FRAMING_BYTES = 64 * 1024

CodeUploaded = inline_serializer(
    "CodeUploaded", {"digest": serializers.CharField(), "size": serializers.IntegerField()}
)
FieldError = inline_serializer(
    "CodeFieldError",
    {
        name: serializers.ListField(child=serializers.CharField(), required=False)
        for name in ("file", "team")
    },
)
Detail = inline_serializer("CodeError", {"detail": serializers.CharField()})


# Read from requests only: its schema component is "CodeUploadRequest", not "…RequestRequest".
@extend_schema_serializer(component_name="CodeUpload")
class CodeUploadRequest(serializers.Serializer[Any]):
    file = serializers.FileField(help_text="A .tar.gz or .zip archive.")
    team = serializers.SlugField(
        required=False, help_text="Team uploading it (default: your only team)."
    )


class CodeArchiveUploadView(APIView):
    """Upload a code archive; jobs name it in their spec's `code`."""

    parser_classes = [MultiPartParser]

    @extend_schema(
        request={"multipart/form-data": CodeUploadRequest},
        responses={
            201: CodeUploaded,
            400: FieldError,
            403: Detail,
            404: OpenApiResponse(Detail, description="`team` is not one of your teams."),
            413: FieldError,
        },
    )
    def post(self, request: Request) -> Response:
        limit = max_bytes()
        too_large = {"file": [f"The archive is larger than {limit / 2**20:g} MiB."]}
        if _content_length(request) > limit + _FRAMING_BYTES:
            return Response(too_large, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        upload = request.FILES.get("file")
        if upload is None:
            raise serializers.ValidationError({"file": ["No file was submitted."]})
        team = _team(request)
        try:
            stored = store_code_archive(data=upload, team=team, user=request.user)
        except CodeArchiveTooLarge:
            return Response(too_large, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        except UnsafeArchive as exc:
            raise serializers.ValidationError({"file": [f"Refused: {exc}."]}) from exc
        body = {"digest": stored.archive.digest, "size": stored.archive.size}
        return Response(body, status=status.HTTP_201_CREATED)


def _content_length(request: Request) -> int:
    value = str(request.META.get("CONTENT_LENGTH") or "")
    return int(value) if value.isascii() and value.isdigit() else 0


def _team(request: Request) -> Team:
    slug = request.data.get("team")
    user = request.user
    assert isinstance(user, User)  # IsAuthenticated
    if slug:
        team = Team.objects.filter(slug=slug).first()
        member = team is not None and team.memberships.filter(user=user).exists()
        if team is None or not (member or is_platform_admin(user)):
            raise exceptions.NotFound(f"You are not a member of team '{slug}'.")
    else:
        teams = list(Team.objects.filter(memberships__user=user)[:2])
        if len(teams) != 1:
            raise serializers.ValidationError(
                {"team": ["Name the team that uploads it (you are in more than one, or none)."]}
            )
        team = teams[0]
    if not can_submit(user, team):
        raise exceptions.PermissionDenied(f"Viewers of team '{team.slug}' cannot upload code.")
    return team


class JobTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Job <job id>:<job token>`; request.auth is the Job."""

    def authenticate(self, request: Request) -> tuple[AnonymousUser, Job] | None:
        scheme, _, value = (request.headers.get("Authorization") or "").partition(" ")
        if scheme != JOB_SCHEME:
            return None
        job_id, _, token = value.strip().partition(":")
        job = Job.objects.filter(pk=int(job_id)).first() if _JOB_ID.fullmatch(job_id) else None
        if job is None or not token or not secrets.compare_digest(job.runtime_token, token):
            raise exceptions.AuthenticationFailed("Unknown job or wrong job token.")
        if job.state in JOB_TERMINAL:
            raise exceptions.AuthenticationFailed(f"Job {job.pk} is over ({job.state}).")
        return AnonymousUser(), job

    def authenticate_header(self, request: Request) -> str:
        return JOB_SCHEME


class IsJob(BasePermission):
    message = "Only a job's tasks fetch code archives (Authorization: Job <id>:<token>)."

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Job)


class CodeArchiveDownloadView(APIView):
    """The archive of the calling job (agents fetch it before starting the job's tasks)."""

    authentication_classes = [JobTokenAuthentication]
    permission_classes = [IsJob]

    @extend_schema(
        responses={
            (200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY),
            401: Detail,
            404: Detail,
        }
    )
    def get(self, request: Request, digest: str) -> FileResponse | Response:
        job = request.auth
        assert isinstance(job, Job)  # guaranteed by IsJob
        path = code_path(digest) if is_digest(digest) else None
        if path is None or job.spec.get("code") != digest or not path.is_file():
            return Response(
                {"detail": f"Job {job.pk} has no code archive {digest}."},
                status=status.HTTP_404_NOT_FOUND,
            )
        return FileResponse(path.open("rb"), content_type="application/octet-stream")


# drf-spectacular registers extensions in an untyped __init_subclass__.
class JobTokenScheme(OpenApiAuthenticationExtension):
    target_class = JobTokenAuthentication
    name = "jobToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Job <job id>:<job token>`: the agent, for one job's tasks.",
        }
