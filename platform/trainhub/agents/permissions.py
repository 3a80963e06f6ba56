from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from trainhub.nodes.models import Node


class IsNode(BasePermission):
    def has_permission(self, request: Request, view: APIView) -> bool:
        return isinstance(request.auth, Node)
