"""DRF permission classes over the `can_<verb>` policies."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from trainhub.tenancy.policies import is_platform_admin


class IsPlatformAdmin(BasePermission):
    message = "Only platform admins may do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return is_platform_admin(request.user)


class ReadOrPlatformAdmin(BasePermission):
    """Any signed-in user reads; only platform admins write."""

    message = "Only platform admins may change this."

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in ("GET", "HEAD", "OPTIONS") or is_platform_admin(request.user)
