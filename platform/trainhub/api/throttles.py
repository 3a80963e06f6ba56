"""Rate limits of the API besides sign-in (which is `ScopedRateThrottle`'s `auth` scope).

Counts live in the default cache: Redis when `REDIS_URL` is set, so every web process
counts into one limit.
"""

from __future__ import annotations

from rest_framework.throttling import UserRateThrottle


class SubmissionRateThrottle(UserRateThrottle):
    """Submissions per user (`TRAINHUB_SUBMIT_RATE`): `POST jobs/` (dry runs too: each
    plans a scheduling cycle) and `POST jobs/{id}/clone/`. Counted before the request is
    read, so a refused one creates nothing and answers 429 with `Retry-After`."""

    scope = "submit"
