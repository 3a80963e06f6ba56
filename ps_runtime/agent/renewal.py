"""When and how the agent renews its node credential (docs/protocol.md §1): two thirds
into its lifetime, with retries that fit several tries before it expires."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from ps_runtime.agent import protocol, rest
from ps_runtime.agent.state import AgentState, save_state

logger = logging.getLogger(__name__)


def seconds_until_renewal(state: AgentState, now: datetime) -> float:
    """How long until the credential is due for renewal (0: now)."""
    renew_at = state.renew_at()
    if renew_at is None:  # a state file from before credentials expired
        return 0.0
    return max(0.0, (renew_at - now).total_seconds())


def retry_delay(state: AgentState, renew_retry: float, now: datetime) -> float:
    """`renew_retry`, but short enough for several tries before the credential expires."""
    expires_at = state.credential_expires_at
    if expires_at is None:
        return renew_retry
    left = (expires_at - now).total_seconds()
    return max(1.0, min(renew_retry, left / 4))


async def keep_renewed(
    renew: Callable[[], Awaitable[None]], current: Callable[[], AgentState], renew_retry: float
) -> None:
    """Call `renew` two thirds into the `current` credential's lifetime, for ever; a failed
    try is retried (`retry_delay`), a refusal raised by `renew` ends the loop."""
    while True:
        await asyncio.sleep(seconds_until_renewal(current(), datetime.now(UTC)))
        try:
            await renew()
        except (rest.HTTPError, ValueError) as exc:  # a ProtocolError is a ValueError
            retry = retry_delay(current(), renew_retry, datetime.now(UTC))
            logger.warning(
                "cannot renew the node credential: %s; retrying in %.0f s",
                exc or type(exc).__name__,
                retry,
            )
            await asyncio.sleep(retry)


async def renewed_state(http: rest.Client, state: AgentState) -> AgentState | None:
    """Ask the server for a new credential: the state holding it, or None when the server
    refused the current one (401: revoked or expired).

    Raises:
        rest.HTTPError, ValueError: no usable answer; the current credential stays.
    """
    url = protocol.api_url(state.server, protocol.CREDENTIAL_PATH)
    issued_at = datetime.now(UTC)
    response = await http.post_async(url)
    if response.status == 401:
        return None
    if response.status != 200:
        raise rest.HTTPError(f"POST {url} answered HTTP {response.status} {response.reason}")
    renewed = protocol.parse_renewed_credential(response.json())
    return dataclasses.replace(
        state,
        credential=renewed.credential,
        credential_issued_at=issued_at,
        credential_expires_at=renewed.credential_expires_at,
    )


def save(state_file: Path, state: AgentState) -> None:
    """Save the renewed credential; a failure is logged, not raised: the server has
    switched already, so the agent keeps using the new one."""
    try:
        save_state(state_file, state)
    except OSError as exc:
        logger.error(
            "cannot save the renewed credential to %s: %s; a restarted agent will "
            "be refused once the previous credential's overlap ends",
            state_file,
            exc,
        )
