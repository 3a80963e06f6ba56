"""`/api/v1/users/me/notifications/` (what you are told about) and `/api/v1/webhooks/`
(your own webhooks and, for team admins, their teams'), through the services the account
and team pages call (`trainhub.notifications.services`)."""

from __future__ import annotations

from typing import Any, NoReturn

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trainhub.notifications.choices import WebhookFormat
from trainhub.notifications.models import Webhook
from trainhub.notifications.policies import can_manage_team_webhooks, can_manage_webhook
from trainhub.notifications.selectors import choices_of, email_available
from trainhub.notifications.services import (
    WebhookError,
    create_webhook,
    delete_webhook,
    set_choices,
    update_webhook,
)
from trainhub.tenancy.models import Team

from ..errors import ErrorResponse, error_response
from ..serializers.notifications import (
    CreatedWebhookSerializer,
    DeliverySerializer,
    NotificationChoicesSerializer,
    WebhookChangeSerializer,
    WebhookRequestSerializer,
    WebhookSerializer,
)
from .jobs import _user

TEAM_REFUSED = "Only team admins set the team's webhooks."


class NotificationChoicesView(APIView):
    """What you are told about your own jobs (succeeded, failed with its cause, preempted,
    stalled), and whether by e-mail; your own webhooks get the same events unless one
    names its own."""

    def _answer(self, request: Request) -> Response:
        user = _user(request)
        choices = choices_of(user)
        return Response(
            NotificationChoicesSerializer(
                {
                    "events": sorted(choices.events),
                    "email": choices.email,
                    "email_address": user.email,
                    "email_available": email_available(),
                }
            ).data
        )

    @extend_schema(responses={200: NotificationChoicesSerializer})
    def get(self, request: Request) -> Response:
        return self._answer(request)

    @extend_schema(
        request=NotificationChoicesSerializer, responses={200: NotificationChoicesSerializer}
    )
    def put(self, request: Request) -> Response:
        params = NotificationChoicesSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        set_choices(
            user=_user(request),
            events=params.validated_data["events"],
            email=params.validated_data["email"],
        )
        return self._answer(request)


class CanManageWebhook(BasePermission):
    """Object level, behind the queryset that already holds only manageable webhooks."""

    def has_object_permission(self, request: Request, view: Any, obj: Webhook) -> bool:
        return can_manage_webhook(request.user, obj)


def _raise_for(exc: WebhookError) -> NoReturn:
    raise serializers.ValidationError({exc.field: [str(exc)]}) from exc


class WebhookViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Webhooks: a signed JSON POST (`X-TrainHub-Signature: sha256=<HMAC-SHA256 of the
    body>`, `X-TrainHub-Timestamp`, `X-TrainHub-Event`, `X-TrainHub-Delivery`) for each
    event, retried with backoff until it is answered 2xx. Yours hear your jobs; a team's
    (set by its admins) every job of the team. Another user's webhook is not found."""

    serializer_class = WebhookSerializer
    permission_classes = [IsAuthenticated, CanManageWebhook]
    queryset = Webhook.objects.none()  # for schema generation; requests use get_queryset

    def get_queryset(self) -> QuerySet[Webhook]:
        if getattr(self, "swagger_fake_view", False):
            return Webhook.objects.none()
        return (
            Webhook.objects.manageable_by(self.request.user)
            .select_related("team")
            .order_by("id")
            .distinct()
        )

    @extend_schema(
        request=WebhookRequestSerializer,
        responses={
            201: CreatedWebhookSerializer,
            403: ErrorResponse,
            404: error_response("No such team among yours."),
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Your own webhook, or (`team`) one of a team you administer; the answer holds
        its secret, shown only this once."""
        params = WebhookRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        team = None
        if data.get("team"):
            team = get_object_or_404(Team.objects.visible_to(request.user), slug=data["team"])
            if not can_manage_team_webhooks(request.user, team):
                raise PermissionDenied(TEAM_REFUSED)
        try:
            created = create_webhook(
                url=data["url"],
                fmt=WebhookFormat(data["format"]),
                events=data.get("events"),
                user=None if team else _user(request),
                team=team,
                actor=request.user,
            )
        except WebhookError as exc:
            _raise_for(exc)
        answer = CreatedWebhookSerializer(created.webhook).data
        answer["secret"] = created.secret
        return Response(answer, status=status.HTTP_201_CREATED)

    @extend_schema(request=WebhookChangeSerializer, responses={200: WebhookSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Change its URL, format or events (its secret stays)."""
        webhook = self.get_object()
        params = WebhookChangeSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        changes: dict[str, Any] = {
            "url": data.get("url"),
            "fmt": WebhookFormat(data["format"]) if "format" in data else None,
        }
        if "events" in data:
            changes["events"] = data["events"]
        try:
            update_webhook(webhook, actor=request.user, **changes)
        except WebhookError as exc:
            _raise_for(exc)
        return Response(WebhookSerializer(webhook).data)

    def perform_destroy(self, instance: Webhook) -> None:
        delete_webhook(instance, actor=self.request.user)

    @extend_schema(responses={200: DeliverySerializer(many=True)})
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str | None = None) -> Response:
        """Its delivery log, newest first: status, attempts, the last answer's code or
        error, and when the next attempt is due."""
        webhook = self.get_object()
        page = self.paginate_queryset(webhook.deliveries.order_by("-id"))
        return self.get_paginated_response(DeliverySerializer(page, many=True).data)
