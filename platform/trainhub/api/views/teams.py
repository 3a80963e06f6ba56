"""`/api/v1/teams/` with members and quota, and `/api/v1/users/`.

Platform admins create, rename, deactivate and reactivate teams here through the tenancy
services the teams pages call (`web/views/team_admin.py`): the same rules, refusals and
audit entries."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from trainhub.jobs.choices import JOB_ACTIVE
from trainhub.jobs.models import Job
from trainhub.jobs.usage import held_by, quota_usage
from trainhub.tenancy.accounts import UserNotFound, find_user
from trainhub.tenancy.choices import Priority, Role
from trainhub.tenancy.models import Membership, Team
from trainhub.tenancy.policies import (
    can_change_quota,
    can_create_team,
    can_manage_members,
    can_rename_team,
)
from trainhub.tenancy.services import (
    QuotaValues,
    TenancyError,
    add_member,
    create_team,
    create_user,
    remove_member,
    rename_team,
    set_priority_caps,
    set_quota,
    set_team_active,
)

from ..errors import Conflict, ErrorResponse
from ..permissions import IsPlatformAdmin
from ..serializers.tenancy import (
    LimitSerializer,
    MembershipSerializer,
    QuotaSerializer,
    RoleSerializer,
    TeamChangeSerializer,
    TeamSerializer,
    UserSerializer,
    quota_document,
)

USERNAME = OpenApiParameter("username", str, OpenApiParameter.PATH, description="A member.")
LAST_ADMIN = OpenApiResponse(ErrorResponse, description="It would leave the team without an admin.")
ACTIVE_REFUSED = OpenApiResponse(
    inline_serializer(
        "TeamActiveRefused",
        {"is_active": serializers.ListField(child=serializers.CharField())},
    ),
    description="The team has active jobs, so it cannot be deactivated; nothing changed.",
)


class TeamViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Teams you belong to (platform admins: all). Platform admins create, rename,
    deactivate and reactivate teams."""

    serializer_class = TeamSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"
    queryset = Team.objects.none()  # for schema generation; requests use get_queryset

    def get_queryset(self) -> QuerySet[Team]:
        return Team.objects.visible_to(self.request.user)

    @extend_schema(
        responses={
            201: TeamSerializer,
            403: ErrorResponse,
            409: OpenApiResponse(ErrorResponse, description="A team with this slug exists."),
        }
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if not can_create_team(request.user):
            raise PermissionDenied("Only platform admins create teams.")
        params = TeamSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            team = create_team(**params.validated_data, actor=request.user)
        except TenancyError as exc:
            raise Conflict(str(exc)) from exc
        return Response(TeamSerializer(team).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=TeamChangeSerializer,
        responses={200: TeamSerializer, 403: ErrorResponse, 409: ACTIVE_REFUSED},
    )
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Rename the team, or deactivate (`is_active: false`) or reactivate it (platform
        admins), as its page does."""
        team = self.get_object()
        if not can_rename_team(request.user, team):
            raise PermissionDenied("Only platform admins rename, deactivate and reactivate teams.")
        params = TeamChangeSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        change = params.validated_data
        with transaction.atomic():  # both changes, or (a refusal) neither
            if "is_active" in change:
                running = Job.objects.filter(team=team, state__in=JOB_ACTIVE).count()
                try:
                    set_team_active(
                        team=team,
                        active=change["is_active"],
                        active_jobs=running,
                        actor=request.user,
                    )
                except TenancyError as exc:
                    raise Conflict({"is_active": [str(exc)]}) from exc
            if "name" in change:
                rename_team(team=team, name=change["name"], actor=request.user)
        return Response(TeamSerializer(team).data)

    @extend_schema(methods=["GET"], responses={200: MembershipSerializer(many=True)})
    @extend_schema(
        methods=["POST"],
        request=MembershipSerializer,
        responses={
            201: MembershipSerializer,
            403: ErrorResponse,
            404: OpenApiResponse(ErrorResponse, description="No such team, or no such user."),
            409: OpenApiResponse(
                ErrorResponse, description="It would leave the team without an admin."
            ),
        },
        description="Add a member, or change the role of an existing one (team admins).",
    )
    @action(detail=True, methods=["get", "post"], pagination_class=None)
    def members(self, request: Request, slug: str | None = None) -> Response:
        team = self.get_object()
        if request.method == "GET":
            memberships = team.memberships.select_related("user").order_by("user__username")
            return Response(MembershipSerializer(memberships, many=True).data)
        if not can_manage_members(request.user, team):
            raise PermissionDenied("Only team admins change the team's members.")
        params = MembershipSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:  # a username, or the e-mail of one active user (as on the team page)
            user = find_user(params.validated_data["user"]["username"])
        except UserNotFound as exc:
            raise NotFound(str(exc)) from exc
        try:
            membership = add_member(
                team=team, user=user, role=Role(params.validated_data["role"]), actor=request.user
            )
        except TenancyError as exc:
            raise Conflict(str(exc)) from exc
        return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        methods=["PATCH"],
        parameters=[USERNAME],
        request=RoleSerializer,
        responses={200: MembershipSerializer, 403: ErrorResponse, 409: LAST_ADMIN},
    )
    @extend_schema(
        methods=["DELETE"],
        parameters=[USERNAME],
        responses={204: None, 403: ErrorResponse, 409: LAST_ADMIN},
    )
    @action(
        detail=True,
        methods=["patch", "delete"],
        url_path=r"members/(?P<username>[\w.@+-]+)",
        url_name="member",
    )
    def member(self, request: Request, slug: str | None = None, username: str = "") -> Response:
        team = self.get_object()
        membership = get_object_or_404(
            Membership.objects.select_related("user"), team=team, user__username=username
        )
        if not can_manage_members(request.user, team):
            raise PermissionDenied("Only team admins change the team's members.")
        if request.method == "DELETE":
            try:
                remove_member(membership=membership, actor=request.user)
            except TenancyError as exc:
                raise Conflict(str(exc)) from exc
            return Response(status=status.HTTP_204_NO_CONTENT)
        # PATCH is a partial update: a body without `role` changes nothing (as the schema's
        # PATCH body, where every field is optional, says).
        params = RoleSerializer(data=request.data, partial=True)
        params.is_valid(raise_exception=True)
        if "role" not in params.validated_data:
            return Response(MembershipSerializer(membership).data)
        try:
            membership = add_member(
                team=team,
                user=membership.user,
                role=Role(params.validated_data["role"]),
                actor=request.user,
            )
        except TenancyError as exc:
            raise Conflict(str(exc)) from exc
        return Response(MembershipSerializer(membership).data)

    @extend_schema(methods=["GET"], responses={200: QuotaSerializer})
    @extend_schema(
        methods=["PUT"],
        request=QuotaSerializer,
        responses={
            200: QuotaSerializer,
            403: ErrorResponse,
            409: OpenApiResponse(
                ErrorResponse, description="Below what the team's production jobs hold now."
            ),
        },
        description="Platform admins set the quota. A cycle runs afterwards to apply it.",
    )
    @action(detail=True, methods=["get", "put"])
    def quota(self, request: Request, slug: str | None = None) -> Response:
        team = self.get_object()
        if request.method == "PUT":
            if not can_change_quota(request.user, team):
                raise PermissionDenied("Only platform admins change quotas.")
            params = QuotaSerializer(data=request.data)
            params.is_valid(raise_exception=True)
            data = params.validated_data
            limits = LimitSerializer()
            try:
                set_quota(
                    team=team,
                    values=QuotaValues(
                        nominal=params.nominal(),
                        borrowing_limit=limits.to_limit(data.get("borrowing_limit")),
                        lending_limit=limits.to_limit(data.get("lending_limit")),
                    ),
                    actor=request.user,
                    held_by_production=held_by([team.pk]).get(team.pk, {}).get(Priority.PRODUCTION),
                )
                if "priority_caps" in data:
                    set_priority_caps(
                        team=team,
                        caps={c["priority"]: limits.to_limit(c) for c in data["priority_caps"]},
                        actor=request.user,
                    )
            except TenancyError as exc:
                raise Conflict(str(exc)) from exc
        team = (
            Team.objects.select_related("quota").prefetch_related("priority_caps").get(pk=team.pk)
        )
        return Response(quota_document(team, quota_usage([team.pk])[team.pk]))


class UserViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Platform admins create and list users; everyone may read `me`."""

    serializer_class = UserSerializer
    permission_classes = [IsPlatformAdmin]
    lookup_field = "username"
    lookup_value_regex = r"[\w.@+-]+"
    queryset = User.objects.none()  # for schema generation; requests use get_queryset

    def get_queryset(self) -> QuerySet[User]:
        return User.objects.order_by("username").prefetch_related("memberships__team")

    @extend_schema(
        responses={
            201: UserSerializer,
            409: OpenApiResponse(ErrorResponse, description="A user with this name exists."),
        }
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer: Any) -> None:
        data = serializer.validated_data
        try:
            serializer.instance = create_user(
                username=data["username"],
                password=data["password"],
                email=data.get("email", ""),
                is_platform_admin=data.get("is_superuser", False),
                actor=self.request.user,
            )
        except TenancyError as exc:
            raise Conflict(str(exc)) from exc

    @extend_schema(responses={200: UserSerializer})
    @action(detail=False, methods=["get"], permission_classes=[IsAuthenticated])
    def me(self, request: Request) -> Response:
        """The signed-in user, with their teams and roles."""
        return Response(UserSerializer(request.user).data)
