"""Filters of the model list (`?name=&job=`)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from .models import ModelVersion


class ModelVersionFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(help_text="The registered name, exactly.")
    # A string, as any query value is: an id that is no job's, or no number, finds nothing.
    job = django_filters.CharFilter(method="by_job", help_text="The id of the exported job.")

    class Meta:
        model = ModelVersion
        fields = ["name", "job"]

    def by_job(
        self, queryset: QuerySet[ModelVersion], name: str, value: str
    ) -> QuerySet[ModelVersion]:
        if not value.isascii() or not value.isdigit() or len(value) > 18:
            return queryset.none()
        return queryset.filter(job_id=int(value))
