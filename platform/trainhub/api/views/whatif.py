"""`POST /api/v1/whatif/`: replay the recorded history with changed quotas or policy
settings (`scheduling.whatif`). Platform admins; team admins for their own teams' quotas."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trainhub.scheduling.whatif import (
    Outcome,
    TeamComparison,
    WhatIf,
    WhatIfError,
    as_seen_by,
    what_if,
)
from trainhub.tenancy.models import Team
from trainhub.tenancy.policies import can_run_whatif, is_platform_admin

from ..serializers.whatif import WhatIfRequestSerializer, WhatIfSerializer
from .jobs import ErrorResponse


class WhatIfView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=WhatIfRequestSerializer,
        responses={200: WhatIfSerializer, 403: ErrorResponse},
        description=(
            "Replay the jobs of the last `days` days through the simulator as they were "
            "(`replay`) and with the changes (`whatif`); per team, beside what actually "
            "happened (`actual`). Nothing is changed."
        ),
    )
    def post(self, request: Request) -> Response:
        params = WhatIfRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        scenario = params.scenario()
        if not can_run_whatif(request.user, set(scenario.quotas)):
            raise PermissionDenied(
                "Only platform admins, and team admins for their own teams' quotas, may run "
                "a what-if."
            )
        try:
            result = what_if(timezone.now(), params.validated_data["days"], scenario)
        except WhatIfError as exc:
            raise serializers.ValidationError({exc.field: [str(exc)]}) from exc
        return Response(WhatIfSerializer(document(result, request.user)).data)


def document(result: WhatIf, user: Any) -> dict[str, Any]:
    """The response body; a team admin sees their own teams and the others pooled."""
    visible = None
    if not is_platform_admin(user):
        visible = set(Team.objects.visible_to(user).values_list("slug", flat=True))
    return {
        "since": result.since,
        "until": result.until,
        "policy": result.policy,
        "jobs": result.jobs,
        "never_ran": result.never_ran,
        "seconds": round(result.seconds, 3),
        "teams": [_row(r) for r in as_seen_by(result, visible)],
    }


def _row(r: TeamComparison) -> dict[str, Any]:
    return {
        "team": r.team,
        "actual": _rounded(r.actual),
        "replay": _rounded(r.replay),
        "whatif": _rounded(r.whatif),
        "change": r.whatif.minus(r.replay),
    }


def _rounded(o: Outcome) -> dict[str, Any]:
    out = asdict(o)
    for key in ("wait_s", "jct_s"):
        out[key] = round(out[key], 1)
    for key in ("cpu_hours", "gpu_hours"):
        out[key] = round(out[key], 2)
    return out
