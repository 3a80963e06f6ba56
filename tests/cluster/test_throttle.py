"""The sign-in throttle holds across both web processes behind nginx: its counters live in
Redis, and its key is the client address nginx appends to X-Forwarded-For (one trusted
proxy), not one the client writes there itself."""

from __future__ import annotations

import re
import secrets
from collections import Counter

import httpx
import pytest

from tests.cluster.harness import Cluster, trusting
from tests.e2e.cluster import ADMIN

pytestmark = [pytest.mark.slow]

RATE = 30  # TRAINHUB_AUTH_RATE's default, per minute


def _from(cluster: Cluster, address: str) -> httpx.Client:
    """A client whose connections to nginx come from `address` (a loopback alias)."""
    context = trusting(cluster.ca_bundle)
    transport = httpx.HTTPTransport(local_address=address, verify=context)
    return httpx.Client(base_url=cluster.url, transport=transport, timeout=30)


def _try(client: httpx.Client, **headers: str) -> int:
    wrong = {"username": ADMIN[0], "password": secrets.token_hex(8)}
    return client.post("/api/v1/auth/token/", json=wrong, headers=headers).status_code


def _answered_by(cluster: Cluster, address: str) -> Counter[str]:
    """Which web process (its address) answered each token request from `address`."""
    log = (cluster.tmp / "logs" / "nginx-access.log").read_text()
    pattern = rf'^{re.escape(address)} "POST /api/v1/auth/token/ [^"]*" \d+ (\S+)$'
    return Counter(re.findall(pattern, log, flags=re.MULTILINE))


def test_sign_in_tries_are_counted_per_client_across_both_web_processes(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    attacker, bystander = _from(cluster, "127.0.0.5"), _from(cluster, "127.0.0.6")
    answers = [_try(attacker) for _ in range(RATE)]
    assert answers == [400] * RATE  # wrong passwords, each counted
    assert _try(attacker) == 429
    # A made-up X-Forwarded-For is not a new client: nginx appends the real address.
    assert _try(attacker, **{"X-Forwarded-For": "198.51.100.7"}) == 429
    # The sign-in form shares the counter (with its CSRF token, so the throttle answers).
    form = attacker.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert token is not None, form.text[:500]
    refused = attacker.post(
        "/login/",
        data={"username": ADMIN[0], "password": "x", "csrfmiddlewaretoken": token.group(1)},
        headers={"Referer": f"{cluster.url}/login/"},
    )
    assert refused.status_code == 429, refused.text[:300]
    # Another client is not held back by it.
    assert _try(bystander) == 400
    signed_in = bystander.post(
        "/api/v1/auth/token/", json={"username": ADMIN[0], "password": ADMIN[1]}
    )
    assert signed_in.status_code == 201, signed_in.text
    answered = _answered_by(cluster, "127.0.0.5")
    assert set(answered) == {web.removeprefix("http://") for web in cluster.webs.values()}
    with capsys.disabled():
        print(
            f"\nsign-in throttle: {RATE} tries from one client, answered by "
            f"{dict(answered)}, then 429 on both processes and the form"
        )
