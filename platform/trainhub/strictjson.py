"""JSON types held strictly at the boundary.

DRF reads a JSON document leniently: `0` becomes the string "0", `"3"` the number 3, `1`
`true`. A document that contradicts the API's schema is refused instead, naming the field,
so what the schema promises is what the server takes.
"""

from __future__ import annotations

from typing import Any

from rest_framework import fields, serializers


def json_type_problem(field: Any, value: Any) -> Any:
    """Why `value` is not of the JSON type `field` reads (a message, or the nested errors of
    a dict or list), or None."""
    if value is None or isinstance(field, (fields.JSONField, fields.FileField)):
        return None
    if isinstance(field, serializers.ListSerializer):
        return _items(field.child, value)
    if isinstance(field, serializers.BaseSerializer):
        return None if isinstance(value, dict) else "Expected an object."
    if isinstance(field, fields.BooleanField):
        return None if isinstance(value, bool) else "Expected true or false."
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(field, fields.IntegerField):
        return None if number and isinstance(value, int) else "Expected a whole number."
    if isinstance(field, (fields.FloatField, fields.DecimalField)):
        return None if number else "Expected a number."
    if isinstance(field, fields.DictField):
        if not isinstance(value, dict):
            return "Expected an object."
        problems = {k: json_type_problem(field.child, v) for k, v in value.items()}
        return {k: _listed(p) for k, p in problems.items() if p is not None} or None
    if isinstance(field, fields.ListField):
        return _items(field.child, value)
    if isinstance(
        field,
        (fields.CharField, fields.ChoiceField, fields.DateTimeField, fields.DateField),
    ):
        return None if isinstance(value, str) else "Expected a string."
    return None


def _items(child: Any, value: Any) -> Any:
    if not isinstance(value, list):
        return "Expected a list."
    problems = [json_type_problem(child, item) for item in value]
    if all(p is None for p in problems):
        return None
    return {str(i): _listed(p) for i, p in enumerate(problems) if p is not None}


def _listed(problem: Any) -> Any:
    return [problem] if isinstance(problem, str) else problem


class JsonTypedSerializer(serializers.Serializer):
    """Refuses a field whose JSON type is not the one the field reads (nested serializers
    check their own fields the same way when they derive from this too)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            problems = {
                name: json_type_problem(field, data[name])
                for name, field in self.fields.items()
                if not field.read_only
                and name in data
                and not isinstance(field, JsonTypedSerializer)
            }
            found = {name: _listed(p) for name, p in problems.items() if p is not None}
            if found:
                raise serializers.ValidationError(found)
        return super().to_internal_value(data)


class StrictSerializer(JsonTypedSerializer):
    """Rejects fields it does not know, so a typo is an error instead of a silent default."""

    refuses_unknown_fields = True  # the API schema says so: `additionalProperties: false`

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: [f"Unknown field '{name}'."] for name in unknown}
                )
        return super().to_internal_value(data)
