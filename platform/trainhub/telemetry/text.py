"""Cleaning reported text before it is stored.

PostgreSQL text holds neither NUL characters nor lone surrogates (which is what invalid
UTF-8 becomes when an agent decodes bytes with `surrogateescape`, or what a JSON string
may carry as `\\ud800`); either would fail the whole insert. Both are replaced with
U+FFFD, the Unicode replacement character, so a line is stored cleaned rather than lost.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def clean_text(value: Any) -> str:
    """`value` as text PostgreSQL and SQLite can store: bytes are decoded as UTF-8, other
    values written with `str`; NUL and invalid UTF-8 become U+FFFD."""
    if isinstance(value, bytes | bytearray):
        text = bytes(value).decode("utf-8", errors="replace")
    else:
        text = value if isinstance(value, str) else str(value)
    return _UNSTORABLE.sub(REPLACEMENT, text)


def storable(text: str) -> bool:
    """Whether `text` can be stored as it is (no NUL, no lone surrogate)."""
    return _UNSTORABLE.search(text) is None
