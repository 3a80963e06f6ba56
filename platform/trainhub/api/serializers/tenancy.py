"""Teams, members, quotas (with usage) and users."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from rest_framework import serializers

from trainhub.strictjson import JsonTypedSerializer, StrictSerializer
from trainhub.tenancy.accounts import USERNAME_PATTERN, password_problems
from trainhub.tenancy.choices import Priority, Role
from trainhub.tenancy.models import Membership, Team
from trainhub.tenancy.resources import (
    MAX_CPU,
    MAX_GPU,
    MAX_MEMORY_MB,
    LimitResources,
    Resources,
)


class TeamSerializer(JsonTypedSerializer, serializers.ModelSerializer):
    slug = serializers.SlugField(max_length=63)
    name = serializers.CharField(max_length=200)
    is_active = serializers.BooleanField(
        read_only=True,
        help_text="False once a platform admin deactivated the team: it takes no new jobs "
        "and its quota is zero.",
    )

    class Meta:
        model = Team
        fields = ["slug", "name", "is_active", "created_at"]
        read_only_fields = ["is_active", "created_at"]


class TeamChangeSerializer(StrictSerializer):
    """`PATCH /api/v1/teams/{slug}/`: what a platform admin changes of a team, as on its
    page; a field left out stays as it is."""

    name = serializers.CharField(max_length=200, required=False)
    is_active = serializers.BooleanField(
        required=False,
        help_text="false deactivates the team (refused while it has active jobs) and sets "
        "its quota to zero; true reactivates it (its quota stays zero until set again).",
    )

    def refusals(self, data: dict[str, Any]) -> dict[str, Any]:
        problems = super().refusals(data)
        for name in sorted(problems.keys() & {"slug", "created_at"}):
            problems[name] = [f"A team's {name} cannot be changed; only name and is_active can."]
        return problems


class MembershipSerializer(JsonTypedSerializer, serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", max_length=150)
    role = serializers.ChoiceField(choices=Role.choices)

    class Meta:
        model = Membership
        fields = ["username", "role"]


class RoleSerializer(JsonTypedSerializer):
    role = serializers.ChoiceField(choices=Role.choices)


class AmountSerializer(serializers.Serializer):
    """An amount of CPU cores, memory (MiB) and GPUs."""

    cpu = serializers.FloatField()
    memory_mb = serializers.IntegerField()
    gpu = serializers.IntegerField()


class LimitSerializer(JsonTypedSerializer):
    """Per-resource limits; null (or left out) means unlimited."""

    cpu = serializers.FloatField(
        min_value=0, max_value=MAX_CPU, allow_null=True, required=False, default=None
    )
    memory_mb = serializers.IntegerField(
        min_value=0, max_value=MAX_MEMORY_MB, allow_null=True, required=False, default=None
    )
    gpu = serializers.IntegerField(
        min_value=0, max_value=MAX_GPU, allow_null=True, required=False, default=None
    )

    def to_limit(self, data: dict[str, Any] | None) -> LimitResources:
        data = data or {}
        return LimitResources(data.get("cpu"), data.get("memory_mb"), data.get("gpu"))


class PriorityCapSerializer(LimitSerializer):
    priority = serializers.ChoiceField(choices=Priority.choices)


class PriorityUsageSerializer(serializers.Serializer):
    priority = serializers.ChoiceField(choices=Priority.choices)
    held = AmountSerializer(help_text="What the team's running tasks at this priority hold.")
    requested = AmountSerializer(
        help_text="What its active jobs at this priority request (pending ones included); "
        "this is what a priority cap limits."
    )


class UsageSerializer(serializers.Serializer):
    used = AmountSerializer(help_text="Held by the team's active tasks.")
    within_quota = AmountSerializer(help_text="The part of `used` within the nominal quota.")
    borrowed = AmountSerializer(help_text="The part of `used` beyond the nominal quota.")
    lent = AmountSerializer(help_text="The team's idle nominal quota that others use.")
    by_priority = PriorityUsageSerializer(many=True)


class QuotaSerializer(JsonTypedSerializer):
    """A team's quota. PUT replaces it; `priority_caps`, when given, replaces the caps."""

    team = serializers.CharField(read_only=True)
    cpu = serializers.FloatField(min_value=0, max_value=MAX_CPU)
    memory_mb = serializers.IntegerField(min_value=0, max_value=MAX_MEMORY_MB)
    gpu = serializers.IntegerField(min_value=0, max_value=MAX_GPU)
    borrowing_limit = LimitSerializer(
        required=False,
        help_text="How much beyond its nominal quota the team may borrow (null: unlimited).",
    )
    lending_limit = LimitSerializer(
        required=False,
        help_text="How much of its idle nominal quota others may use (null: all of it).",
    )
    priority_caps = PriorityCapSerializer(many=True, required=False)
    usage = UsageSerializer(read_only=True)

    def validate_priority_caps(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen = [cap["priority"] for cap in value]
        if len(seen) != len(set(seen)):
            raise serializers.ValidationError("Each priority may appear once.")
        return value

    def nominal(self) -> Resources:
        data = self.validated_data
        return Resources(data["cpu"], data["memory_mb"], data["gpu"])


def quota_document(team: Team, usage: Any) -> dict[str, Any]:
    """The quota resource's body for `team` and its `QuotaUsage`."""
    quota = team.quota
    caps = [
        {"priority": c.priority, "cpu": c.cpu, "memory_mb": c.memory_mb, "gpu": c.gpu}
        for c in team.priority_caps.all()
    ]
    by_priority = [
        {
            "priority": p,
            "held": usage.held_by_priority.get(p, Resources()).as_dict(),
            "requested": usage.requested_by_priority.get(p, Resources()).as_dict(),
        }
        for p in Priority.values
    ]
    return {
        "team": team.slug,
        "cpu": quota.cpu,
        "memory_mb": quota.memory_mb,
        "gpu": quota.gpu,
        "borrowing_limit": quota.borrowing_limit.as_dict(),
        "lending_limit": quota.lending_limit.as_dict(),
        "priority_caps": caps,
        "usage": {
            "used": usage.used.as_dict(),
            "within_quota": usage.within_quota.as_dict(),
            "borrowed": usage.borrowed.as_dict(),
            "lent": usage.lent.as_dict(),
            "by_priority": by_priority,
        },
    }


class UserSerializer(JsonTypedSerializer, serializers.ModelSerializer):
    username = serializers.RegexField(USERNAME_PATTERN, max_length=150)
    email = serializers.EmailField(required=False, allow_blank=True, max_length=254)
    password = serializers.CharField(
        write_only=True, max_length=128, style={"input_type": "password"}
    )
    is_platform_admin = serializers.BooleanField(source="is_superuser", default=False)
    teams = serializers.SerializerMethodField()

    class Meta:
        model = User
        fields = ["id", "username", "email", "password", "is_platform_admin", "teams"]
        read_only_fields = ["id"]

    def get_teams(self, user: User) -> list[dict[str, str]]:
        # Sorted here, not in SQL, so a prefetched list needs no query per user.
        memberships = sorted(user.memberships.all(), key=lambda m: m.team.slug)
        return [{"team": m.team.slug, "role": m.role} for m in memberships]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # The validators compare it with the new user's name and email, so they run once
        # those are known.
        problems = password_problems(
            attrs.get("password", ""),
            username=attrs.get("username", ""),
            email=attrs.get("email", ""),
        )
        if problems:
            raise serializers.ValidationError({"password": problems})
        return attrs
