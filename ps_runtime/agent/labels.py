"""Node labels (`zone=eu-1,rack=4`): the one parser and checker, used by
`trainhub-agent enroll --labels` and by the server when it stores them."""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_LABELS = 32
# Kubernetes' shape for names and values: letters, digits, `-`, `_`, `.` (and `/` in a
# key, for a prefix such as `example.com/team`), starting and ending alphanumeric.
KEY_PATTERN = r"[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?"
VALUE_PATTERN = r"([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?"
_KEY = re.compile(KEY_PATTERN)
_VALUE = re.compile(VALUE_PATTERN)


class LabelError(ValueError):
    """A label is malformed; the message names it and says what is allowed."""


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels as a plain dict, or `LabelError` naming the first bad one."""
    if len(labels) > MAX_LABELS:
        raise LabelError(f"at most {MAX_LABELS} labels, got {len(labels)}")
    for key, value in labels.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise LabelError(
                f"label name {key!r} is not allowed: 1-63 letters, digits, '-', '_', '.' or "
                "'/', starting and ending with a letter or digit"
            )
        if not isinstance(value, str) or not _VALUE.fullmatch(value):
            raise LabelError(
                f"label {key}={value!r}: the value may be empty or 1-63 letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit"
            )
    return dict(labels)


def parse_labels(text: str) -> dict[str, str]:
    """`"zone=eu-1,rack=4"` → `{"zone": "eu-1", "rack": "4"}`; `LabelError` on a bad pair."""
    labels: dict[str, str] = {}
    for item in text.split(","):
        pair = item.strip()
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep:
            raise LabelError(f"label {pair!r} must be written key=value (e.g. zone=eu-1)")
        key, value = key.strip(), value.strip()
        if key in labels:
            raise LabelError(f"label {key!r} is given twice")
        labels[key] = value
    return check_labels(labels)
