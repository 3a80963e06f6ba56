"""`/healthz` (the process is up) and `/readyz` (database and broker reachable).

Both answer anyone (load balancers probe without credentials), but only a signed-in
caller (session or API token) learns which check failed and how: anonymous callers get
the status alone.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse

from .token_auth import BoundedTokenAuthentication


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _signed_in(request: HttpRequest) -> bool:
    """A session or an API token; False when that cannot be told (the database is down)."""
    try:
        if request.user.is_authenticated:
            return True
        return BoundedTokenAuthentication().authenticate(request) is not None
    except Exception:
        return False


def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {exc.__class__.__name__}"
    if settings.REDIS_URL:
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2).ping()
            checks["broker"] = "ok"
        except Exception as exc:
            checks["broker"] = f"error: {exc.__class__.__name__}"
    ready = all(v == "ok" for v in checks.values())
    body: dict[str, object] = {"status": "ok" if ready else "unavailable"}
    if _signed_in(request):
        body["checks"] = checks
    return JsonResponse(body, status=200 if ready else 503)
