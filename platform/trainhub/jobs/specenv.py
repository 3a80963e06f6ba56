"""The job spec's `environment` section: the job's own Python packages, checked at the
boundary with the same rules the agent applies again (`ps_runtime.agent.envspec`), and a
code archive's top-level `requirements.txt` joined to them."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ps_runtime.agent.envspec import (
    MAX_REQUIREMENTS,
    MAX_TIMEOUT_SECONDS,
    MIN_TIMEOUT_SECONDS,
    PYTHON_VERSION,
    requirement_problem,
    requirements_from_text,
)
from ps_runtime.archives import UnsafeArchive
from trainhub.strictjson import StrictSerializer

from .codearchives import REQUIREMENTS_FILE, archive_requirements


class EnvironmentSerializer(StrictSerializer):
    """`environment`: pip requirement lines (the node's package index settings apply),
    the Python version, and how long a node may take to build it."""

    requirements = serializers.ListField(
        child=serializers.CharField(max_length=200, allow_blank=True, trim_whitespace=True),
        max_length=MAX_REQUIREMENTS,
        required=False,
        default=list,
        help_text="pip requirement lines (no options, direct references or paths); a "
        "requirements.txt at the top of `code` joins them.",
    )
    python = serializers.CharField(
        max_length=5,
        required=False,
        allow_blank=True,
        default="",
        help_text="The Python version, e.g. '3.11'; empty: the nodes' task interpreter.",
    )
    timeout_seconds = serializers.IntegerField(
        min_value=int(MIN_TIMEOUT_SECONDS),
        max_value=int(MAX_TIMEOUT_SECONDS),
        default=900,
        help_text="A build on a node that takes longer fails the job.",
    )

    def validate_requirements(self, value: list[str]) -> list[str]:
        return _checked_requirements(value, "requirements")

    def validate_python(self, value: str) -> str:
        if value and not PYTHON_VERSION.match(value):
            raise serializers.ValidationError("Expected a version like '3.11'.")
        return value


def _checked_requirements(lines: list[str], where: str) -> list[str]:
    errors = []
    kept = []
    for n, line in enumerate(lines):
        problem = requirement_problem(line)
        if problem is not None:
            errors.append(f"{where} line {n + 1} ({line.strip()[:60]!r}) {problem}.")
        else:
            kept.append(line.strip())
    if errors:
        raise serializers.ValidationError(errors)
    return kept


def _environment_defaults() -> dict[str, Any]:
    serializer = EnvironmentSerializer(data={})
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def add_archive_requirements(attrs: dict[str, Any]) -> None:
    """A `requirements.txt` at the top of the code archive joins the spec's requirements
    (an `environment` is made for it when the spec has none)."""
    if not attrs.get("code"):
        return
    try:
        text = archive_requirements(attrs["code"])
    except (UnsafeArchive, OSError) as exc:
        raise serializers.ValidationError(
            {"code": [f"Cannot read {REQUIREMENTS_FILE}: {exc}"]}
        ) from None
    if text is None:
        return
    try:
        lines = _checked_requirements(requirements_from_text(text), REQUIREMENTS_FILE)
    except serializers.ValidationError as exc:
        raise serializers.ValidationError({"code": exc.detail}) from None
    environment = dict(attrs.get("environment") or dict(_environment_defaults()))
    own = list(environment.get("requirements") or [])
    environment["requirements"] = own + [line for line in lines if line not in own]
    if len(environment["requirements"]) > MAX_REQUIREMENTS:
        raise serializers.ValidationError(
            {"environment": {"requirements": [f"More than {MAX_REQUIREMENTS} requirements."]}}
        )
    attrs["environment"] = environment
