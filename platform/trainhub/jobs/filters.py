"""Filters of the job list (`?team=&state=&priority=&name=&submitted_by=`), with
django-filter; the API's job list and the web's `/jobs/` both use `JobFilter`, so they
filter alike."""

from __future__ import annotations

import django_filters

from .choices import JobState, Priority
from .models import Job


class JobFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", help_text="Team slug.")
    # distinct=False: these filter the job's own columns, so no row can repeat, and a
    # DISTINCT over every column (the JSON spec too) costs more than the rest of the page.
    state = django_filters.MultipleChoiceFilter(
        choices=JobState.choices,
        distinct=False,
        help_text="One or more states (repeat the parameter).",
    )
    priority = django_filters.MultipleChoiceFilter(choices=Priority.choices, distinct=False)
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="Part of the job name.")
    submitted_by = django_filters.CharFilter(
        field_name="submitted_by__username", help_text="Username of the submitter."
    )

    class Meta:
        model = Job
        fields = ["team", "state", "priority", "name", "submitted_by"]
