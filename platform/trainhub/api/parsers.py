"""The API's one request format: JSON, strictly (RFC 8259 numbers only)."""

from __future__ import annotations

import codecs
import json
import math
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


class StrictJSONParser(JSONParser):
    """JSON that refuses `NaN`, `Infinity` and numbers too large for a float (`1e999`), which
    Python's `json` would otherwise read as non-finite floats."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json.load(
                codecs.getreader(encoding)(stream),
                parse_float=_finite,
                parse_constant=_refuse_constant,
            )
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
