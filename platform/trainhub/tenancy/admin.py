"""Django admin for teams (members, quota and priority caps edited inline) and users.

Every save goes through the tenancy services, so each change is validated, audited and
published (`QuotaChanged`: the scheduler applies a new quota in its next cycle).

Two things shown and checked here are measured by the jobs app, which sits above
tenancy: what a team's jobs use, and what its production jobs hold (a quota may not go
below that). They are read through the function named by `settings.TEAM_USAGE_READER`
(`trainhub.jobs.usage.quota_usage`), the way `EVENT_HANDLERS` names upper-layer code,
so tenancy never imports jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.utils.module_loading import import_string

from .choices import Priority, Role
from .models import Membership, PriorityCap, Quota, Team
from .resources import LimitResources, Resources, describe
from .services import (
    QuotaValues,
    TenancyError,
    add_member,
    create_team,
    remove_member,
    rename_team,
    save_user,
    set_priority_caps,
    set_quota,
)


class TeamUsage(Protocol):
    """A team's use of the cluster, as `trainhub.jobs.usage.QuotaUsage` reports it."""

    @property
    def used(self) -> Resources: ...
    @property
    def within_quota(self) -> Resources: ...
    @property
    def borrowed(self) -> Resources: ...
    @property
    def lent(self) -> Resources: ...
    @property
    def held_by_priority(self) -> Mapping[str, Resources]: ...


def _team_usage(team_id: int) -> TeamUsage:
    reader: Callable[[Iterable[int]], Mapping[int, TeamUsage]]
    reader = import_string(settings.TEAM_USAGE_READER)
    return reader([team_id])[team_id]


def _production_held(team: Team | None) -> Resources | None:
    if team is None or team.pk is None:
        return None
    return _team_usage(team.pk).held_by_priority.get(Priority.PRODUCTION)


class QuotaForm(forms.ModelForm):
    class Meta:
        model = Quota
        fields = [
            "cpu",
            "memory_mb",
            "gpu",
            "borrowing_limit_cpu",
            "borrowing_limit_memory_mb",
            "borrowing_limit_gpu",
            "lending_limit_cpu",
            "lending_limit_memory_mb",
            "lending_limit_gpu",
        ]
        # Memory in MiB, named as the team pages and the API name it.
        labels = {
            "cpu": "CPU cores",
            "memory_mb": "Memory (MiB)",
            "gpu": "GPUs",
            "borrowing_limit_cpu": "CPU cores",
            "borrowing_limit_memory_mb": "Memory (MiB)",
            "borrowing_limit_gpu": "GPUs",
            "lending_limit_cpu": "CPU cores",
            "lending_limit_memory_mb": "Memory (MiB)",
            "lending_limit_gpu": "GPUs",
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        team = getattr(self.instance, "team", None) if self.instance.team_id else None
        held = _production_held(team)
        if held is not None and None not in (
            data.get("cpu"),
            data.get("memory_mb"),
            data.get("gpu"),
        ):
            nominal = Resources(data["cpu"], data["memory_mb"], data["gpu"])
            below = held.exceeding(nominal)
            if below:
                raise forms.ValidationError(
                    f"The team's production jobs hold {describe(held, below)}; the quota "
                    "cannot be set below that. Stop or shrink them first."
                )
        return data


class QuotaInline(admin.StackedInline):
    model = Quota
    form = QuotaForm
    can_delete = False
    min_num = 1
    max_num = 1
    fieldsets = [
        ("Nominal", {"fields": [("cpu", "memory_mb", "gpu")]}),
        (
            "Borrowing limit (beyond nominal; empty = unlimited)",
            {
                "fields": [
                    ("borrowing_limit_cpu", "borrowing_limit_memory_mb", "borrowing_limit_gpu")
                ]
            },
        ),
        (
            "Lending limit (of idle nominal; empty = lend all)",
            {"fields": [("lending_limit_cpu", "lending_limit_memory_mb", "lending_limit_gpu")]},
        ),
    ]


class PriorityCapForm(forms.ModelForm):
    class Meta:
        model = PriorityCap
        fields = ["priority", "cpu", "memory_mb", "gpu"]
        labels = {"cpu": "CPU cores", "memory_mb": "Memory (MiB)", "gpu": "GPUs"}


class PriorityCapInline(admin.TabularInline):
    model = PriorityCap
    form = PriorityCapForm
    extra = 0
    # The heading is the plural: a parenthesis in the singular read "…RESOURCE)S".
    verbose_name = "priority cap"
    verbose_name_plural = "priority caps (empty = no cap on that resource)"


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "quota_summary", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("usage_summary",)
    inlines = [QuotaInline, PriorityCapInline, MembershipInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("slug", "usage_summary") if obj is not None else ()

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("slug", "name", "usage_summary") if obj is not None else ("slug", "name")

    @admin.display(description="Quota")
    def quota_summary(self, team: Team) -> str:
        quota = Quota.objects.filter(team=team).first()
        return describe(quota.nominal) if quota else "-"

    @admin.display(description="Usage")
    def usage_summary(self, team: Team) -> str:
        usage = _team_usage(team.pk)
        return (
            f"used: {describe(usage.used)} — within quota: {describe(usage.within_quota)} — "
            f"borrowed: {describe(usage.borrowed)} — lent: {describe(usage.lent)}"
        )

    def save_model(self, request: HttpRequest, obj: Team, form: Any, change: bool) -> None:
        if change:
            if "name" in form.changed_data:
                rename_team(team=obj, name=obj.name, actor=request.user)
            return
        team = create_team(slug=obj.slug, name=obj.name, actor=request.user)
        obj.pk, obj.created_at = team.pk, team.created_at
        obj._state.adding = False

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        team: Team = form.instance
        # The admin's own change message reads these; our record is the audit log.
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        try:
            if formset.model is Quota:
                self._save_quota(request, team, formset)
            elif formset.model is PriorityCap:
                self._save_caps(request, team, formset)
            elif formset.model is Membership:
                self._save_members(request, team, formset)
            else:
                super().save_formset(request, form, formset, change)
        except TenancyError as exc:
            messages.error(request, str(exc))

    def _save_quota(self, request: HttpRequest, team: Team, formset: Any) -> None:
        for f in formset.forms:
            data = f.cleaned_data
            if not data:
                continue
            set_quota(
                team=team,
                values=QuotaValues(
                    nominal=Resources(data["cpu"], data["memory_mb"], data["gpu"]),
                    borrowing_limit=_limit(data, "borrowing_limit_"),
                    lending_limit=_limit(data, "lending_limit_"),
                ),
                actor=request.user,
                held_by_production=_production_held(team),
            )

    def _save_caps(self, request: HttpRequest, team: Team, formset: Any) -> None:
        caps = {
            f.cleaned_data["priority"]: _limit(f.cleaned_data)
            for f in formset.forms
            if f.cleaned_data
            and not f.cleaned_data.get("DELETE")
            and f.cleaned_data.get("priority")
        }
        set_priority_caps(team=team, caps=caps, actor=request.user)

    def _save_members(self, request: HttpRequest, team: Team, formset: Any) -> None:
        for f in formset.forms:
            data = f.cleaned_data
            if not data:
                continue
            if data.get("DELETE"):
                if f.instance.pk:
                    remove_member(membership=f.instance, actor=request.user)
            elif f.has_changed():
                add_member(
                    team=team, user=data["user"], role=Role(data["role"]), actor=request.user
                )


def _limit(data: Mapping[str, Any], prefix: str = "") -> LimitResources:
    """The limits in a form's cleaned data (`<prefix>cpu` …); an empty field is no limit."""
    return LimitResources(
        data.get(f"{prefix}cpu"), data.get(f"{prefix}memory_mb"), data.get(f"{prefix}gpu")
    )


class AuditedUserAdmin(UserAdmin):
    """Django's user admin, saving through `save_user` so platform-role changes are audited."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        save_user(user=obj, actor=request.user)


admin.site.unregister(User)
admin.site.register(User, AuditedUserAdmin)
