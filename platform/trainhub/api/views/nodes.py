"""`/api/v1/nodes/` (labels by PATCH; cordon, drain, uncordon, approve, revoke-credential) and
`/api/v1/enrollment-tokens/`."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from trainhub.jobs.choices import TASK_ACTIVE
from trainhub.nodes.choices import NodeState
from trainhub.nodes.credentials import revoke_node_credential
from trainhub.nodes.install import install_command, public_server_url
from trainhub.nodes.models import EnrollmentToken, Node
from trainhub.nodes.services import (
    TokenTermsError,
    approve_node,
    create_enrollment_token,
    revoke_enrollment_token,
    set_node_labels,
    set_node_state,
)

from ..errors import ErrorResponse
from ..permissions import IsPlatformAdmin, ReadOrPlatformAdmin
from ..serializers.nodes import (
    EnrollmentTokenRequestSerializer,
    EnrollmentTokenSerializer,
    IssuedEnrollmentTokenSerializer,
    NodeLabelsSerializer,
    NodeSerializer,
)
from .jobs import _user

LabelsRefused = OpenApiResponse(
    inline_serializer(
        "NodeLabelsError",
        {"labels": serializers.JSONField(required=False, help_text="What is wrong with them.")},
    ),
    description="Nothing changed; the body names the field at fault: `labels`, or a field "
    "other than `labels` that was sent.",
)


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """The cluster's nodes; every signed-in user reads them, platform admins change them."""

    serializer_class = NodeSerializer
    permission_classes = [ReadOrPlatformAdmin]
    queryset = Node.objects.none()  # for schema generation; requests use get_queryset

    def get_queryset(self) -> QuerySet[Node]:
        return Node.objects.annotate(
            active_tasks=Count("tasks", filter=Q(tasks__state__in=TASK_ACTIVE))
        ).order_by("id")

    @extend_schema(
        request=NodeLabelsSerializer,
        responses={200: NodeSerializer, 400: LabelsRefused, 403: ErrorResponse},
    )
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Replace the node's labels (platform admins); only `labels` can be changed."""
        node = self.get_object()
        params = NodeLabelsSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        if "labels" in params.validated_data:
            set_node_labels(node=node, labels=params.validated_data["labels"], actor=_user(request))
        return Response(NodeSerializer(self.get_queryset().get(pk=node.pk)).data)

    def _set(self, state: NodeState) -> Response:
        node = self.get_object()
        set_node_state(node=node, state=state, actor=self.request.user)
        return Response(NodeSerializer(self.get_queryset().get(pk=node.pk)).data)

    @extend_schema(request=None, responses={200: NodeSerializer, 403: ErrorResponse})
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, pk: str | None = None) -> Response:
        """No new tasks go to the node; running ones keep running."""
        return self._set(NodeState.CORDONED)

    @extend_schema(request=None, responses={200: NodeSerializer, 403: ErrorResponse})
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, pk: str | None = None) -> Response:
        """Take the node out of service: no new tasks; `drained` once the last one ends."""
        return self._set(NodeState.DRAINING)

    @extend_schema(request=None, responses={200: NodeSerializer, 403: ErrorResponse})
    @action(detail=True, methods=["post"])
    def uncordon(self, request: Request, pk: str | None = None) -> Response:
        """Put the node back into service (a node awaiting approval is approved)."""
        return self._set(NodeState.ACTIVE)

    @extend_schema(request=None, responses={200: NodeSerializer, 403: ErrorResponse})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve a node enrolled with a token that requires approval: it leaves cordon
        and gets work. A node that awaits no approval is left as it is."""
        node = self.get_object()
        approve_node(node=node, actor=self.request.user)
        return Response(NodeSerializer(self.get_queryset().get(pk=node.pk)).data)

    @extend_schema(request=None, responses={200: NodeSerializer, 403: ErrorResponse})
    @action(detail=True, methods=["post"], url_path="revoke-credential")
    def revoke_credential(self, request: Request, pk: str | None = None) -> Response:
        """Refuse the node's credential from now on: its agent is disconnected, it gets no
        new work and what ran there is rescheduled. Enroll the machine again to return."""
        node = self.get_object()
        revoke_node_credential(node=node, actor=self.request.user)
        return Response(NodeSerializer(self.get_queryset().get(pk=node.pk)).data)


class EnrollmentTokenViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, viewsets.GenericViewSet
):
    """Platform admins create tokens that let agents enroll nodes."""

    serializer_class = EnrollmentTokenSerializer
    permission_classes = [IsPlatformAdmin]
    queryset = EnrollmentToken.objects.none()  # for schema generation

    def get_queryset(self) -> QuerySet[EnrollmentToken]:
        return EnrollmentToken.objects.select_related("created_by").order_by("-id")

    @extend_schema(
        request=EnrollmentTokenRequestSerializer, responses={201: IssuedEnrollmentTokenSerializer}
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A token (single use, one hour by default) and the command that installs a node
        with it; the secret is shown only in this answer."""
        params = EnrollmentTokenRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            issued = create_enrollment_token(created_by=_user(request), **params.validated_data)
        except TokenTermsError as exc:  # `expires_at` passed while the request ran
            raise ValidationError({exc.field: [str(exc)]}) from exc
        answer = IssuedEnrollmentTokenSerializer(
            {
                "id": issued.id,
                "token": issued.secret,
                "expires_at": issued.expires_at,
                "max_uses": issued.max_uses,
                "install_command": install_command(public_server_url(request), issued.secret),
            }
        )
        return Response(answer.data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: EnrollmentTokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        token = self.get_object()
        revoke_enrollment_token(token=token, actor=request.user)
        token.refresh_from_db()
        return Response(EnrollmentTokenSerializer(token).data)
