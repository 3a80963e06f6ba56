"""One attempt at one endpoint: a webhook POST or an e-mail, and what came of it.

A webhook is posted to an address checked by `destinations.public_addresses` — the
connection goes to that address, with the URL's host in `Host` and in TLS's SNI and
certificate check — so nothing resolves the name again between the check and the
connection. Redirects are not followed (a redirect is an answer that is not 2xx), and no
proxy from the environment is used. What an attempt records never holds the URL (its
path or query may be a token, as Slack's are) or the secret.
"""

from __future__ import annotations

import smtplib
from dataclasses import dataclass

import httpx
from django.conf import settings
from django.core.mail import send_mail

from .destinations import DestinationError, parse_url, public_addresses

ERROR_LENGTH = 300


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status_code: int | None = None  # the HTTP answer's, for a webhook that answered
    error: str = ""


def post_webhook(url: str, body: bytes, headers: dict[str, str]) -> Outcome:
    """POST `body` once; 2xx is delivered, anything else (an answer, a refusal, a timeout)
    is a failure to try again."""
    try:
        parts = parse_url(url)
        addresses = public_addresses(parts, allow_private=settings.WEBHOOK_ALLOW_PRIVATE)
    except DestinationError as exc:
        return Outcome(ok=False, error=str(exc))
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL:
        return Outcome(ok=False, error="the URL cannot be sent to")
    host_header = parts.netloc.rsplit("@", 1)[-1]
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    error = ""
    with httpx.Client(
        timeout=settings.WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False, trust_env=False
    ) as client:
        for address in addresses:
            try:
                response = client.post(
                    target.copy_with(host=address),
                    content=body,
                    headers={**headers, "Host": host_header},
                    extensions=extensions,
                )
            except httpx.ConnectError:
                error = f"could not connect to {parts.hostname}"
                continue  # the name's next address
            except httpx.TimeoutException:
                return Outcome(ok=False, error=f"no answer within {client.timeout.read} s")
            except httpx.HTTPError as exc:
                return Outcome(ok=False, error=type(exc).__name__)
            ok = 200 <= response.status_code < 300
            code = response.status_code
            return Outcome(ok=ok, status_code=code, error="" if ok else f"answered HTTP {code}")
    return Outcome(ok=False, error=error or "no address to connect to")


def send_email(address: str, subject: str, body: str) -> Outcome:
    """Send one e-mail through Django's configured backend (`EMAIL_*`)."""
    if not address:
        return Outcome(ok=False, error="the user has no e-mail address")
    try:
        send_mail(subject, body, None, [address], fail_silently=False)
    except (smtplib.SMTPException, OSError) as exc:
        return Outcome(ok=False, error=f"{type(exc).__name__}: {exc}"[:ERROR_LENGTH])
    return Outcome(ok=True)
