"""An experiment document at the boundary: a job spec plus its `search:` block."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.spec import parse_job_spec

from .searchspec import SearchSpec, SearchSpecError


def parse_experiment(data: Any, *, user: object) -> tuple[JobSpec, SearchSpec]:
    """The trials' job spec and the search, validated; a `ValidationError` names each bad
    field (`search.params.lr.low`, `workers.max`) and nothing is created."""
    if not isinstance(data, Mapping):
        raise serializers.ValidationError({"non_field_errors": ["Expected a mapping."]})
    body = dict(data)
    if "search" not in body:
        raise serializers.ValidationError(
            {"search": ["Required: the search block (method, metric, params, ...)."]}
        )
    raw_search = body.pop("search")
    errors: dict[str, list[str]] = {}
    search: SearchSpec | None = None
    try:
        search = SearchSpec.from_dict(raw_search)
    except SearchSpecError as exc:
        errors.update({path: [message] for path, message in exc.errors.items()})
    try:
        spec = parse_job_spec(body, user=user)
    except serializers.ValidationError as exc:
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        errors.update({str(k): v for k, v in detail.items()})  # type: ignore[misc]
    if search is not None and search.max_budget is not None:
        clash = [p.name for p in search.params if p.name == search.budget_arg]
        if clash:
            errors["search.budget_arg"] = [
                f"'{search.budget_arg}' is a searched parameter too; the budget sets it"
            ]
    if errors:
        raise serializers.ValidationError(errors)
    assert search is not None
    return spec, search
