"""The what-if page's form: how many days to replay, the policy settings, and each team's
quota as the user may change it (prefilled with today's values)."""

from __future__ import annotations

from typing import Any

from django import forms

from trainhub.scheduling.policy import POLICIES
from trainhub.scheduling.whatif import QuotaChange, Scenario
from trainhub.tenancy.models import Quota
from trainhub.tenancy.resources import RESOURCE_NAMES

from .team_forms import RESOURCE_LABELS, _amount_field, _plain


class WhatIfForm(forms.Form):
    days = forms.FloatField(
        label="Days to replay", min_value=0.01, max_value=90, initial=7, help_text="at most 90"
    )
    policy = forms.ChoiceField(label="Policy", required=False)
    grace = forms.FloatField(
        label="Preemption grace (s)", min_value=0, max_value=86400, required=False
    )

    def __init__(self, *args: Any, quotas: list[Quota], platform_policy: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.quotas = quotas
        policy_field = self.fields["policy"]
        assert isinstance(policy_field, forms.ChoiceField)
        policy_field.choices = [("", f"as today ({platform_policy})")] + [
            (name, name) for name in sorted(POLICIES)
        ]
        for quota in quotas:
            slug = quota.team.slug
            for name in RESOURCE_NAMES:
                field = _amount_field(name, label=RESOURCE_LABELS[name], required=False)
                field.initial = _plain(getattr(quota, name))
                self.fields[f"quota-{slug}-{name}"] = field
                limit = _amount_field(
                    name, label=f"May borrow: {RESOURCE_LABELS[name]}", required=False
                )
                limit.initial = _plain(getattr(quota, f"borrowing_limit_{name}"))
                self.fields[f"borrow-{slug}-{name}"] = limit

    def team_rows(self) -> list[dict[str, Any]]:
        """Per team, its quota fields then its borrowing-limit fields."""
        return [
            {
                "slug": q.team.slug,
                "quota": [self[f"quota-{q.team.slug}-{n}"] for n in RESOURCE_NAMES],
                "borrow": [self[f"borrow-{q.team.slug}-{n}"] for n in RESOURCE_NAMES],
            }
            for q in self.quotas
        ]

    def scenario(self) -> Scenario:
        """The changes asked for. A field left out of the request (a shared link that names
        only some) keeps today's value; so does a blank quota; a blank borrowing limit that
        was sent is unlimited."""
        data = self.cleaned_data
        quotas = {}
        for quota in self.quotas:
            slug = quota.team.slug
            nominal = {}
            limits: dict[str, float | None] = {}
            for n in RESOURCE_NAMES:
                if data.get(f"quota-{slug}-{n}") is not None:
                    nominal[n] = data[f"quota-{slug}-{n}"]
                if f"borrow-{slug}-{n}" in self.data:
                    limits[n] = data.get(f"borrow-{slug}-{n}")
            quotas[slug] = QuotaChange(nominal=nominal, borrowing_limit=limits)
        return Scenario(
            quotas=quotas,
            policy=data["policy"] or None,
            preemption_grace_seconds=data["grace"],
        )
