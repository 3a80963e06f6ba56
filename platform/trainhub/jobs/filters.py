"""Filters of the job list (`?team=&state=&priority=&name=`), with django-filter."""

from __future__ import annotations

import django_filters

from .choices import JobState, Priority
from .models import Job


class JobFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", help_text="Team slug.")
    state = django_filters.MultipleChoiceFilter(
        choices=JobState.choices, help_text="One or more states (repeat the parameter)."
    )
    priority = django_filters.MultipleChoiceFilter(choices=Priority.choices)
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="Part of the job name.")
    submitted_by = django_filters.CharFilter(field_name="submitted_by__username")

    class Meta:
        model = Job
        fields = ["team", "state", "priority", "name", "submitted_by"]
