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
        # JSON Schema's integer: 3 and 3.0 alike (DRF reads 3.0 as 3), not 2.5.
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        return None if number and whole else "Expected a whole number."
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
    check their own fields the same way when they derive from this too).

    Every error is reported at once: the type problems are merged with what the other
    fields, and `validate()`, find (a type problem replaces its field's own message)."""

    def run_validation(self, data: Any = fields.empty) -> Any:
        problems = self.refusals(data) if isinstance(data, dict) else {}
        if not problems:
            return super().run_validation(data)
        try:
            super().run_validation(data)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(_merged(problems, exc.detail)) from None
        raise serializers.ValidationError(problems)

    def refusals(self, data: dict[str, Any]) -> dict[str, Any]:
        """What is refused in `data` before its values are read: {field: errors}."""
        problems = {
            name: json_type_problem(field, data[name])
            for name, field in self.fields.items()
            if not field.read_only and name in data and not isinstance(field, JsonTypedSerializer)
        }
        return {name: _listed(p) for name, p in problems.items() if p is not None}


def _merged(problems: dict[str, Any], detail: Any) -> dict[str, Any]:
    """The other fields' errors (`detail`: a serializer's are a dict) with `problems`; a
    field in both keeps its problem ("Expected a whole number." says more than "A valid
    integer is required.")."""
    merged = dict(detail) if isinstance(detail, dict) else {}
    merged.update(problems)
    return merged


class StrictSerializer(JsonTypedSerializer):
    """Rejects fields it does not know, so a typo is an error instead of a silent default."""

    refuses_unknown_fields = True  # the API schema says so: `additionalProperties: false`

    def refusals(self, data: dict[str, Any]) -> dict[str, Any]:
        unknown = {
            name: [f"Unknown field '{name}'."] for name in sorted(set(data) - set(self.fields))
        }
        return {**super().refusals(data), **unknown}
