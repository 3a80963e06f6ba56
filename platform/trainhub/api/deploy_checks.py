"""Production refuses to start while `manage.py check --deploy` objects to its settings.

`ApiConfig.ready` calls `refuse_insecure_deploy` when `TRAINHUB_ENV=production`, so the
web server, Celery and every management command stop at start-up with one message that
names what to set. Django's deploy checks are warnings; in production each one counts as
an error (what `check --deploy --fail-level WARNING` would say). An operator's explicit
opt-outs (`TRAINHUB_SSL_REDIRECT=0`, `TRAINHUB_HSTS_PRELOAD=0`) silence their check in
settings.py.
"""

from __future__ import annotations

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

# What an operator sets to answer each deploy check TrainHub's settings leave to them.
HINTS = {
    "security.W004": "set TRAINHUB_HSTS_SECONDS to a positive number of seconds",
    "security.W008": "set TRAINHUB_SSL_REDIRECT=1 (or =0 where the proxy redirects)",
    "security.W009": "set TRAINHUB_SECRET_KEY to 50 or more random characters",
    "security.W018": "set TRAINHUB_DEBUG=0",
    "security.W020": "set TRAINHUB_ALLOWED_HOSTS to the host names clients use",
    "security.W021": "set TRAINHUB_HSTS_PRELOAD=1 (or =0 to opt out)",
}


def deploy_problems() -> list[str]:
    """Each objection of the deploy checks (silenced ones left out), with what to set."""
    found = checks.run_checks(include_deployment_checks=True)
    problems = []
    for message in found:
        if message.level < checks.WARNING or message.is_silenced():
            continue
        hint = HINTS.get(message.id or "", message.hint or "")
        problems.append(f"{message.id}: {message.msg}" + (f" Fix: {hint}." if hint else ""))
    return problems


def refuse_insecure_deploy() -> None:
    """Raise `ImproperlyConfigured` naming every objection; return if there are none."""
    problems = deploy_problems()
    if problems:
        listed = "\n".join(f"- {p}" for p in problems)
        raise ImproperlyConfigured(
            "TRAINHUB_ENV=production refuses to start: `manage.py check --deploy` "
            f"reports {len(problems)} problem(s):\n{listed}"
        )
