"""The agent-facing HTTP endpoints: enrollment, desired tasks, credential renewal."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from ps_runtime.agent.protocol import Enrolled, RenewedCredential
from trainhub.jobs.selectors import desired_tasks
from trainhub.nodes.credentials import renew_node_credential
from trainhub.nodes.models import Node
from trainhub.nodes.services import EnrollmentError, enroll_node

from ..authentication import NodeCredentialAuthentication
from ..permissions import IsNode
from .serializers import EnrolledSerializer, EnrollSerializer, RenewedCredentialSerializer


class EnrollView(APIView):
    """Register a node with an enrollment token; returns its credential once."""

    authentication_classes: list[type[BaseAuthentication]] = []
    permission_classes = [AllowAny]  # the enrollment token in the body authenticates
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "auth"

    @extend_schema(request=EnrollSerializer, responses={201: EnrolledSerializer})
    def post(self, request: Request) -> Response:
        serializer = EnrollSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        facts = dict(serializer.validated_data)
        token = facts.pop("token")
        try:
            issued = enroll_node(token=token, facts=facts, now=timezone.now())
        except EnrollmentError as exc:
            raise serializers.ValidationError({exc.field: [str(exc)]}) from exc
        enrolled = Enrolled(
            node_id=issued.id, credential=issued.secret, credential_expires_at=issued.expires_at
        )
        return Response(enrolled.to_wire(), status=status.HTTP_201_CREATED)


class DesiredTasksView(APIView):
    """The complete set of tasks that should run on the calling node now."""

    authentication_classes = [NodeCredentialAuthentication]
    permission_classes = [IsNode]

    @extend_schema(responses={200: dict})
    def get(self, request: Request) -> Response:
        node = request.auth
        assert isinstance(node, Node)  # guaranteed by IsNode
        return Response(desired_tasks(node).to_wire())


class CredentialView(APIView):
    """Renew the calling node's credential: a new one with a full lifetime, shown once."""

    authentication_classes = [NodeCredentialAuthentication]
    permission_classes = [IsNode]

    @extend_schema(request=None, responses={200: RenewedCredentialSerializer})
    def post(self, request: Request) -> Response:
        node = request.auth
        assert isinstance(node, Node)  # guaranteed by IsNode
        issued = renew_node_credential(node=node, now=timezone.now())
        renewed = RenewedCredential(
            credential=issued.secret, credential_expires_at=issued.expires_at
        )
        return Response(renewed.to_wire())
