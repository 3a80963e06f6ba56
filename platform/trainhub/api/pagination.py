"""Limit/offset pagination with bounds, so no page request can overflow the database."""

from __future__ import annotations

from typing import Any

from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

MAX_OFFSET = 10**12


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = 1000

    def get_offset(self, request: Request) -> int:
        return min(super().get_offset(request), MAX_OFFSET)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["description"] += f" At most {self.max_limit}."
        return parameters
