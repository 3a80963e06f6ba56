"""docs/reference/jobspec.md is what the job spec's serializers say, field by field."""

from __future__ import annotations

import difflib
from pathlib import Path

from rest_framework import serializers
from trainhub.jobs.specreference import OUTPUT, render, slug, undocumented

REPO = Path(__file__).resolve().parents[3]


def test_the_committed_reference_is_generated_from_the_serializers() -> None:
    committed = (REPO / OUTPUT).read_text()
    generated = render()
    diff = difflib.unified_diff(
        committed.splitlines(), generated.splitlines(), "committed", "generated", lineterm=""
    )
    assert committed == generated, (
        f"{OUTPUT} differs from the job spec's serializers (platform/trainhub/jobs/spec*.py): "
        "run `make docs-reference` and commit the result\n" + "\n".join(list(diff)[:30])
    )


def test_every_field_of_the_spec_says_what_it_is() -> None:
    missing = undocumented()
    assert not missing, (
        "job spec fields without help_text (the reference shows it as their description): "
        + ", ".join(missing)
    )


class _Limits(serializers.Serializer[dict[str, object]]):
    count = serializers.IntegerField(min_value=2, help_text="How many.")
    ratio = serializers.FloatField(max_value=0.5, default=0.25, help_text="A part.")
    mode = serializers.ChoiceField(choices=["a", "b"], required=False, help_text="A | B.")


class _Root(serializers.Serializer[dict[str, object]]):
    limits = _Limits(required=False, help_text="Nested.")


def test_a_section_renders_its_bounds_choices_defaults_and_links() -> None:
    page = render(_Root())
    assert "| [`limits`](#limits) | object | each field's default | Nested. |" in page
    assert "| `count` | integer from 2 | **required** | How many. |" in page
    assert "| `ratio` | number up to 0.5 | `0.25` | A part. |" in page
    assert "| `mode` | string: `a`, `b` | — | A \\| B. |" in page  # a pipe cannot split a cell
    assert slug("`workers.resources`") == "workersresources"
    assert slug("Job spec (v1)") == "job-spec-v1"
