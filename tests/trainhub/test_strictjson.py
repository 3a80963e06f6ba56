"""Strict JSON serializers report every error at once: unknown fields, JSON type problems,
the other fields' errors and the nested serializers' `validate()`, in one detail."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from trainhub.strictjson import JsonTypedSerializer, StrictSerializer


class _Range(StrictSerializer):
    min = serializers.IntegerField(default=1)
    max = serializers.IntegerField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("max", attrs["min"])
        if attrs["max"] < attrs["min"]:
            raise serializers.ValidationError({"max": ["max must be at least min."]})
        return attrs


class _Spec(StrictSerializer):
    name = serializers.CharField()
    size = serializers.IntegerField(min_value=1, default=1)
    range = _Range(required=False)
    ranges = _Range(many=True, required=False)


class _Typed(JsonTypedSerializer):
    count = serializers.IntegerField()
    tag = serializers.CharField(max_length=3)


def _errors(serializer_class: type[serializers.Serializer[Any]], data: Any) -> Any:
    serializer = serializer_class(data=data)
    assert not serializer.is_valid()
    return serializer.errors


def test_an_unknown_field_and_a_nested_validate_error_are_both_reported() -> None:
    errors = _errors(_Spec, {"name": "x", "bogus": 1, "range": {"min": 3, "max": 2}})
    assert errors == {
        "range": {"max": ["max must be at least min."]},
        "bogus": ["Unknown field 'bogus'."],
    }


def test_an_unknown_field_beside_a_bad_range_in_the_same_section_both_are_reported() -> None:
    errors = _errors(_Spec, {"name": "x", "range": {"min": 3, "max": 2, "maxx": 9}})
    assert errors == {
        "range": {"max": ["max must be at least min."], "maxx": ["Unknown field 'maxx'."]}
    }


def test_every_field_is_checked_beside_unknown_ones() -> None:
    errors = _errors(_Spec, {"size": 0, "foo": 1, "bar": 2})
    assert set(errors) == {"name", "size", "foo", "bar"}
    assert errors["name"] == ["This field is required."]
    assert errors["size"] == ["Ensure this value is greater than or equal to 1."]


def test_items_of_a_list_report_their_own_unknown_fields_and_ranges() -> None:
    errors = _errors(_Spec, {"name": "x", "ranges": [{"min": 1}, {"min": 2, "max": 1, "z": 0}]})
    # DRF names the refused item by its index.
    assert errors == {
        "ranges": {1: {"max": ["max must be at least min."], "z": ["Unknown field 'z'."]}}
    }


def test_a_type_problem_is_reported_with_the_other_fields_errors() -> None:
    errors = _errors(_Typed, {"count": "3", "tag": "long"})
    assert errors == {
        "count": ["Expected a whole number."],
        "tag": ["Ensure this field has no more than 3 characters."],
    }


def test_a_type_problem_replaces_its_fields_own_message() -> None:
    assert _errors(_Typed, {"count": "many", "tag": "ok"}) == {
        "count": ["Expected a whole number."]
    }


def test_a_type_problem_inside_a_section_is_reported_with_an_unknown_field_outside() -> None:
    errors = _errors(_Spec, {"name": "x", "range": {"min": "3"}, "extra": True})
    assert errors == {
        "range": {"min": ["Expected a whole number."]},
        "extra": ["Unknown field 'extra'."],
    }


def test_a_whole_number_written_with_a_point_is_a_whole_number() -> None:
    """JSON Schema's integer holds 3.0 (a fuzzer sends it): read as 3; 2.5 is refused."""
    serializer = _Spec(data={"name": "x", "range": {"min": 3.0}})
    assert serializer.is_valid(), serializer.errors
    assert serializer.validated_data["range"]["min"] == 3
    assert _errors(_Spec, {"name": "x", "range": {"min": 2.5}}) == {
        "range": {"min": ["Expected a whole number."]}
    }


def test_a_valid_document_still_validates() -> None:
    serializer = _Spec(data={"name": "x", "range": {"min": 2}, "ranges": [{"max": 4}]})
    assert serializer.is_valid(), serializer.errors
    assert serializer.validated_data["range"] == {"min": 2, "max": 2}
    assert serializer.validated_data["ranges"] == [{"min": 1, "max": 4}]
