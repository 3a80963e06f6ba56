"""Named PostgreSQL advisory locks, in one registry so keys never collide."""

from __future__ import annotations

from django.db import connection

ADVISORY_LOCK_KEYS = {
    "scheduling_cycle": 0x7472_6169_6E01,
}


def try_advisory_xact_lock(name: str) -> bool:
    """Take the named lock for the current transaction, without waiting.

    On SQLite (standalone) writers are already serialized by the database, so the cycle
    is single-flight without a lock.
    """
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEYS[name]])
        return bool(cursor.fetchone()[0])
