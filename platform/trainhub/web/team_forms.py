"""Forms of the team and account pages.

They check what a browser sends and hand typed values to the same services the REST API
calls (`trainhub.tenancy.services`, `trainhub.tenancy.tokens`), with the API's bounds and
messages, so a refusal reads the same in both.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.models import User
from django.core.validators import MaxValueValidator
from django.utils import timezone

from trainhub.tenancy.accounts import UserNotFound, find_user
from trainhub.tenancy.choices import Priority, Role
from trainhub.tenancy.models import TOKEN_NAME_MAX_LENGTH, PriorityCap, Quota
from trainhub.tenancy.resources import (
    MAX_CPU,
    MAX_GPU,
    MAX_MEMORY_MB,
    RESOURCE_NAMES,
    LimitResources,
    Resources,
)
from trainhub.tenancy.services import QuotaValues
from trainhub.tenancy.tokens import NAME_REQUIRED, NAME_TOO_LONG, lifetime_problem

RESOURCE_LABELS = {"cpu": "CPU cores", "memory_mb": "Memory (MiB)", "gpu": "GPUs"}


def _amount_field(resource: str, *, label: str, required: bool) -> forms.Field:
    if resource == "cpu":
        return forms.FloatField(label=label, min_value=0, max_value=MAX_CPU, required=required)
    top = MAX_MEMORY_MB if resource == "memory_mb" else MAX_GPU
    return forms.IntegerField(label=label, min_value=0, max_value=top, required=required)


def _plain(value: float | None) -> float | None:
    """4.0 shown as 4 in an input."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class MemberForm(forms.Form):
    """Add a member to a team, or change an existing member's role (as the API's POST):
    by username, or by the e-mail of one active user."""

    username = forms.CharField(label="Username or e-mail", max_length=254)
    role = forms.ChoiceField(label="Role", choices=Role.choices, initial=Role.MEMBER)

    user: User | None = None

    def clean_username(self) -> str:
        try:
            self.user = find_user(self.cleaned_data["username"])
        except UserNotFound as exc:
            raise forms.ValidationError(str(exc)) from exc
        return self.user.username


class TeamForm(forms.Form):
    """A new team, with the API's rules (`POST /api/v1/teams/`); its quota is set on its
    page afterwards."""

    slug = forms.SlugField(
        label="Slug",
        max_length=63,
        help_text="Letters, digits, - and _; job specs name the team by it. It cannot change.",
    )
    name = forms.CharField(label="Name", max_length=200)


class RenameTeamForm(forms.Form):
    name = forms.CharField(label="Name", max_length=200)


class RoleForm(forms.Form):
    role = forms.ChoiceField(label="Role", choices=Role.choices)


class QuotaForm(forms.Form):
    """A team's nominal quota, borrowing and lending limits and per-priority caps.

    A blank limit is unlimited; a priority with every cap blank has no cap.
    """

    LIMIT_GROUPS = (
        ("borrowing_limit", "Borrowing limit", "beyond the quota; blank: unlimited"),
        ("lending_limit", "Lending limit", "of its idle quota; blank: all of it"),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in RESOURCE_NAMES:
            self.fields[name] = _amount_field(name, label=RESOURCE_LABELS[name], required=True)
        for prefix, title, _ in self.LIMIT_GROUPS:
            for name in RESOURCE_NAMES:
                self.fields[f"{prefix}_{name}"] = _amount_field(
                    name, label=f"{title}: {RESOURCE_LABELS[name]}", required=False
                )
        for priority, title in Priority.choices:
            for name in RESOURCE_NAMES:
                self.fields[f"cap_{priority}_{name}"] = _amount_field(
                    name, label=f"{title} cap: {RESOURCE_LABELS[name]}", required=False
                )

    @staticmethod
    def initial_for(quota: Quota, caps: list[PriorityCap]) -> dict[str, Any]:
        initial: dict[str, Any] = {name: _plain(getattr(quota, name)) for name in RESOURCE_NAMES}
        for prefix, _, _ in QuotaForm.LIMIT_GROUPS:
            for name in RESOURCE_NAMES:
                initial[f"{prefix}_{name}"] = _plain(getattr(quota, f"{prefix}_{name}"))
        for cap in caps:
            for name in RESOURCE_NAMES:
                initial[f"cap_{cap.priority}_{name}"] = _plain(getattr(cap, name))
        return initial

    def groups(self) -> list[dict[str, Any]]:
        """The fields by fieldset, for the template: nominal, the two limits."""
        result = [
            {"legend": "Nominal quota", "help": "", "fields": [self[n] for n in RESOURCE_NAMES]}
        ]
        for prefix, title, help_text in self.LIMIT_GROUPS:
            fields = [self[f"{prefix}_{n}"] for n in RESOURCE_NAMES]
            result.append({"legend": title, "help": help_text, "fields": fields})
        return result

    def cap_rows(self) -> list[dict[str, Any]]:
        """One row per priority: its label and its three cap fields."""
        return [
            {"priority": title, "fields": [self[f"cap_{p}_{n}"] for n in RESOURCE_NAMES]}
            for p, title in Priority.choices
        ]

    def _limit(self, prefix: str) -> LimitResources:
        data = self.cleaned_data
        return LimitResources(*(data.get(f"{prefix}_{n}") for n in RESOURCE_NAMES))

    def values(self) -> QuotaValues:
        data = self.cleaned_data
        return QuotaValues(
            nominal=Resources(*(data[n] for n in RESOURCE_NAMES)),
            borrowing_limit=self._limit("borrowing_limit"),
            lending_limit=self._limit("lending_limit"),
        )

    def caps(self) -> dict[str, LimitResources]:
        caps = {p: self._limit(f"cap_{p}") for p in Priority.values}
        return {p: cap for p, cap in caps.items() if cap != LimitResources()}


class TokenForm(forms.Form):
    """A new personal API token, named by its owner; with neither expiry field it lives as
    long as the server allows (`TRAINHUB_TOKEN_MAX_DAYS`), as in the API."""

    name = forms.CharField(
        label="Name",
        max_length=TOKEN_NAME_MAX_LENGTH,
        error_messages={"required": NAME_REQUIRED, "max_length": NAME_TOO_LONG},
        help_text="What uses it, e.g. “laptop CLI” or “nightly script”.",
    )

    expires_in_days = forms.IntegerField(
        label="Expires in (days)",
        min_value=1,
        required=False,
        help_text="Blank (and no date): the longest this server allows.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        days = self.fields["expires_in_days"]
        assert isinstance(days, forms.IntegerField)
        days.max_value = settings.TOKEN_MAX_DAYS
        days.validators.append(MaxValueValidator(settings.TOKEN_MAX_DAYS))
        days.widget.attrs["max"] = settings.TOKEN_MAX_DAYS
        days.help_text = f"Blank (and no date): {settings.TOKEN_MAX_DAYS} days, the most allowed."

    expires_on = forms.DateField(
        label="Or valid until (date)",
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="It stops working at the end of that day.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        days, day = data.get("expires_in_days"), data.get("expires_on")
        if days is not None and day is not None:
            raise forms.ValidationError("Give a number of days or a date, not both.")
        expires_at: datetime | None = None
        if days is not None:
            expires_at = timezone.now() + timedelta(days=days)
        elif day is not None:
            zone = timezone.get_current_timezone()
            expires_at = datetime.combine(day + timedelta(days=1), time.min, tzinfo=zone)
            if expires_at <= timezone.now():
                self.add_error("expires_on", "Must be in the future.")
            elif problem := lifetime_problem(expires_at, timezone.now()):
                self.add_error("expires_on", problem)
        data["expires_at"] = expires_at
        return data
