"""`POST /api/v1/whatif/`: the changes to replay, and the per-team comparison it answers."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from trainhub.scheduling.policy import POLICIES
from trainhub.scheduling.whatif import MAX_JOBS, QuotaChange, Scenario
from trainhub.strictjson import StrictSerializer
from trainhub.tenancy.resources import MAX_CPU, MAX_GPU, MAX_MEMORY_MB


class LimitChangeSerializer(StrictSerializer):
    """Limits to change; null is unlimited, a resource left out keeps its current limit."""

    cpu = serializers.FloatField(min_value=0, max_value=MAX_CPU, allow_null=True, required=False)
    memory_mb = serializers.IntegerField(
        min_value=0, max_value=MAX_MEMORY_MB, allow_null=True, required=False
    )
    gpu = serializers.IntegerField(min_value=0, max_value=MAX_GPU, allow_null=True, required=False)


class QuotaChangeSerializer(StrictSerializer):
    """A team's quota in the what-if; a resource left out keeps its current value."""

    team = serializers.SlugField(max_length=63)
    cpu = serializers.FloatField(min_value=0, max_value=MAX_CPU, required=False)
    memory_mb = serializers.IntegerField(min_value=0, max_value=MAX_MEMORY_MB, required=False)
    gpu = serializers.IntegerField(min_value=0, max_value=MAX_GPU, required=False)
    borrowing_limit = LimitChangeSerializer(required=False)
    lending_limit = LimitChangeSerializer(required=False)


# Read from requests only: its schema component is "WhatIfRequest", not "…RequestRequest".
@extend_schema_serializer(component_name="WhatIf")
class WhatIfRequestSerializer(StrictSerializer):
    days = serializers.FloatField(
        min_value=0.01,
        max_value=90,
        default=7,
        help_text=f"Replay the jobs submitted in this many days (at most {MAX_JOBS} jobs).",
    )
    policy = serializers.ChoiceField(choices=sorted(POLICIES), required=False)
    preemption_grace_seconds = serializers.FloatField(min_value=0, max_value=86400, required=False)
    aging_seconds_per_level = serializers.FloatField(
        min_value=1, max_value=30 * 86400, required=False
    )
    quotas = QuotaChangeSerializer(many=True, required=False, default=list)

    def validate_quotas(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        teams = [q["team"] for q in value]
        if len(teams) != len(set(teams)):
            raise serializers.ValidationError("Each team may appear once.")
        return value

    def scenario(self) -> Scenario:
        data = self.validated_data
        quotas = {}
        for q in data["quotas"]:
            quotas[q["team"]] = QuotaChange(
                nominal={k: q[k] for k in ("cpu", "memory_mb", "gpu") if k in q},
                borrowing_limit=dict(q.get("borrowing_limit") or {}),
                lending_limit=dict(q.get("lending_limit") or {}),
            )
        return Scenario(
            quotas=quotas,
            policy=data.get("policy"),
            preemption_grace_seconds=data.get("preemption_grace_seconds"),
            aging_seconds_per_level=data.get("aging_seconds_per_level"),
        )


class OutcomeSerializer(serializers.Serializer[Any]):
    jobs = serializers.IntegerField()
    wait_s = serializers.FloatField(help_text="Mean wait from submission to first start.")
    jct_s = serializers.FloatField(help_text="Mean completion time of the jobs that finished.")
    cpu_hours = serializers.FloatField()
    gpu_hours = serializers.FloatField()
    never_started = serializers.IntegerField(help_text="Jobs this history never starts.")


class ChangeSerializer(serializers.Serializer[Any]):
    wait_s = serializers.FloatField()
    jct_s = serializers.FloatField()
    cpu_hours = serializers.FloatField()
    gpu_hours = serializers.FloatField()


class TeamComparisonSerializer(serializers.Serializer[Any]):
    team = serializers.CharField()
    actual = OutcomeSerializer(help_text="What happened.")
    replay = OutcomeSerializer(help_text="The simulator's replay with today's settings.")
    whatif = OutcomeSerializer(help_text="The replay with the changes.")
    change = ChangeSerializer(help_text="What-if minus replay.")


class WhatIfSerializer(serializers.Serializer[Any]):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    policy = serializers.CharField()
    jobs = serializers.IntegerField(help_text="Jobs of the window that ran, replayed.")
    never_ran = serializers.IntegerField(help_text="Jobs of the window that never ran.")
    seconds = serializers.FloatField(help_text="How long the two replays took.")
    teams = TeamComparisonSerializer(many=True)
