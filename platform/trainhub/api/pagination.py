"""Limit/offset pagination with bounds, so no page request can overflow the database, and
strict: a `limit` or `offset` that is not a number in range is a 400 naming it, never a
silent first page."""

from __future__ import annotations

import re
from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

MAX_OFFSET = 10**12
# Any whole number (a huge one is clamped like any other above the bound); the length cap
# keeps int() cheap.
_DIGITS = re.compile(r"[0-9]{1,1000}")


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = 1000

    def get_limit(self, request: Request) -> int:
        limit = _count(request, self.limit_query_param, minimum=1)
        if limit is None:
            return int(self.default_limit or 0)
        return min(limit, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return min(_count(request, self.offset_query_param, minimum=0) or 0, MAX_OFFSET)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["description"] += f" At most {self.max_limit}; more gives that."
                parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.offset_query_param:
                parameter["schema"]["minimum"] = 0
        return parameters


def _count(request: Request, name: str, *, minimum: int) -> int | None:
    """The query parameter `name` as a whole number of at least `minimum`; None if absent."""
    values = request.query_params.getlist(name)
    if not values:
        return None
    if len(values) > 1:
        raise ValidationError({name: ["Give it once."]})
    if not _DIGITS.fullmatch(values[0]) or int(values[0]) < minimum:
        raise ValidationError({name: [f"Expected a whole number, at least {minimum}."]})
    return int(values[0])
