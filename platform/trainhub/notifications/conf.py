"""Settings of notifications, read from the environment as the settings load (settings.py
star-imports this module, so a bad value stops the process naming its variable).

Django's e-mail settings (`EMAIL_*`, `DEFAULT_FROM_EMAIL`) come from `TRAINHUB_EMAIL_*`;
without `TRAINHUB_EMAIL_HOST` (or a backend named outright) the server sends no e-mail
and the account page says so. Webhooks: `TRAINHUB_WEBHOOK_*`, and the retry schedule of
every delivery: `TRAINHUB_NOTIFY_*` (docs/reference/settings.md).
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from trainhub.envsettings import env_count, env_flag

__all__ = [
    "DEFAULT_FROM_EMAIL",
    "EMAIL_BACKEND",
    "EMAIL_HOST",
    "EMAIL_HOST_PASSWORD",
    "EMAIL_HOST_USER",
    "EMAIL_PORT",
    "EMAIL_TIMEOUT",
    "EMAIL_USE_SSL",
    "EMAIL_USE_TLS",
    "NOTIFY_ATTEMPTS",
    "NOTIFY_RETRY_SECONDS",
    "NOTIFY_SWEEP_SECONDS",
    "WEBHOOK_ALLOW_PRIVATE",
    "WEBHOOK_TIMEOUT_SECONDS",
]

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
NO_EMAIL_BACKEND = "django.core.mail.backends.dummy.EmailBackend"


def _positive(name: str, default: int) -> int:
    value = env_count(name, default)
    if value < 1:
        raise ImproperlyConfigured(f"{name}={value}: must be 1 or more")
    return value


EMAIL_HOST = os.environ.get("TRAINHUB_EMAIL_HOST", "").strip()
EMAIL_PORT = env_count("TRAINHUB_EMAIL_PORT", 587)
EMAIL_HOST_USER = os.environ.get("TRAINHUB_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("TRAINHUB_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_flag("TRAINHUB_EMAIL_USE_TLS", True)  # STARTTLS on EMAIL_PORT
EMAIL_USE_SSL = env_flag("TRAINHUB_EMAIL_USE_SSL", False)  # TLS from the start (port 465)
if EMAIL_USE_SSL:
    EMAIL_USE_TLS = False  # Django refuses both; SSL named outright wins
EMAIL_TIMEOUT = 20
DEFAULT_FROM_EMAIL = (
    os.environ.get("TRAINHUB_EMAIL_FROM", "").strip() or "TrainHub <trainhub@localhost>"
)
EMAIL_BACKEND = os.environ.get("TRAINHUB_EMAIL_BACKEND", "").strip() or (
    SMTP_BACKEND if EMAIL_HOST else NO_EMAIL_BACKEND
)

# Webhooks to private, loopback, link-local or otherwise non-public addresses are refused
# (SSRF) unless this is on: an installation whose receivers live on its own network, and
# the tests' loopback receiver.
WEBHOOK_ALLOW_PRIVATE = env_flag("TRAINHUB_WEBHOOK_ALLOW_PRIVATE", False)
WEBHOOK_TIMEOUT_SECONDS = _positive("TRAINHUB_WEBHOOK_TIMEOUT", 10)
# A delivery that fails is tried again after RETRY, 2 x RETRY, 4 x RETRY … seconds (at most
# an hour apart), ATTEMPTS times in all; Celery beat looks for due ones every SWEEP seconds.
NOTIFY_ATTEMPTS = _positive("TRAINHUB_NOTIFY_ATTEMPTS", 8)
NOTIFY_RETRY_SECONDS = _positive("TRAINHUB_NOTIFY_RETRY_SECONDS", 30)
NOTIFY_SWEEP_SECONDS = _positive("TRAINHUB_NOTIFY_SWEEP_SECONDS", 30)
