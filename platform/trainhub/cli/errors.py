"""How a client command fails: its message and the exit status a script can test."""

from __future__ import annotations

EXIT_REFUSED, EXIT_USAGE, EXIT_LOGIN, EXIT_SERVER = 1, 2, 3, 4


class CommandError(Exception):
    def __init__(self, message: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code
