"""Authenticating agents by their node credential (`Authorization: Node <credential>`)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from trainhub.nodes.credentials import authenticate_node
from trainhub.nodes.models import Node

SCHEME = "Node"


def credential_from_header(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, credential = value.partition(" ")
    if scheme != SCHEME or not credential.strip():
        return None
    return credential.strip()


class NodeCredentialAuthentication(authentication.BaseAuthentication):
    """request.auth is the Node; request.user is anonymous (a node is not a person)."""

    def authenticate(self, request: Request) -> tuple[AnonymousUser, Node] | None:
        credential = credential_from_header(request.headers.get("Authorization"))
        if credential is None:
            return None
        node = authenticate_node(credential)
        if node is None:
            raise exceptions.AuthenticationFailed(
                "Unknown, expired or revoked node credential; enroll this node again with "
                "`trainhub-agent enroll`."
            )
        return AnonymousUser(), node

    def authenticate_header(self, request: Request) -> str:
        return SCHEME


# drf-spectacular registers extensions in an untyped __init_subclass__.
class NodeCredentialScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = NodeCredentialAuthentication
    name = "nodeCredential"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Node <credential>`, as returned by node enrollment.",
        }
