"""User-facing REST API views: thin, each calls one service or selector."""

from .jobs import _plain

__all__ = ["_plain"]
