"""Rate limits on the sign-in forms: `/login/` and `/admin/login/`.

They share the `auth` rate (`TRAINHUB_AUTH_RATE`) and its counters with the API's
`POST /api/v1/auth/token/`, so trying passwords on one form uses up the others too. The
counter is keyed on the client address as `TRAINHUB_TRUSTED_PROXIES` gives it (DRF's
`NUM_PROXIES`), so a client cannot pick a fresh key per try with `X-Forwarded-For`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from rest_framework.throttling import ScopedRateThrottle

View = Callable[..., HttpResponseBase]


class _SignIn:
    """What `ScopedRateThrottle` reads off a view: the rate's name."""

    throttle_scope = "auth"


def throttled_sign_in(view: View) -> View:
    """`view` with its POSTs (the tries) counted; over the rate they get a 429."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "POST":
            throttle = ScopedRateThrottle()
            if not throttle.allow_request(request, _SignIn()):  # type: ignore[arg-type]
                wait = int(throttle.wait() or 1)
                return HttpResponse(
                    f"Too many sign-in attempts from your address; try again in {wait} s.",
                    status=429,
                    content_type="text/plain; charset=utf-8",
                    headers={"Retry-After": str(wait)},
                )
        return view(request, *args, **kwargs)

    return wrapped
