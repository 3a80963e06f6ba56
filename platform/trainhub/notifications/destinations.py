"""Where a webhook may point (SSRF): http or https, no credentials in the URL, and only
public addresses unless `WEBHOOK_ALLOW_PRIVATE` (`TRAINHUB_WEBHOOK_ALLOW_PRIVATE`).

The check runs twice: when a webhook is saved (an address, or a name that resolves to a
non-public one, is refused naming `url`) and before every attempt, on the addresses the
attempt then connects to (`public_addresses`), so a name that later resolves to a private
address (DNS rebinding) is refused too.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import SplitResult, urlsplit

MAX_URL_LENGTH = 2000

Resolver = Callable[[str, int], list[str]]


class DestinationError(ValueError):
    """The URL may not receive webhooks; the message says why and what to do."""


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (IPv4 and IPv6), in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def parse_url(url: str) -> SplitResult:
    """The URL's parts, when it is a webhook URL at all (http or https, a host, no
    credentials or fragment)."""
    if len(url) > MAX_URL_LENGTH:
        raise DestinationError(f"At most {MAX_URL_LENGTH} characters.")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise DestinationError("A URL has no spaces or control characters.")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed [IPv6 literal
        raise DestinationError("This is not a URL.") from exc
    if parts.scheme not in ("http", "https"):
        raise DestinationError("Use an http:// or https:// URL.")
    if not parts.hostname:
        raise DestinationError("The URL names no host.")
    if parts.username is not None or parts.password is not None:
        raise DestinationError(
            "Leave credentials out of the URL: the signature header authenticates TrainHub."
        )
    try:
        parts.port  # noqa: B018 -- raises on a port out of range
    except ValueError as exc:
        raise DestinationError("The URL's port is not a number from 1 to 65535.") from exc
    return parts


def port_of(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def is_public(address: str) -> bool:
    """Whether an address is on the public internet: not private, loopback, link-local,
    shared (CGNAT), multicast, reserved or unspecified (IPv4-mapped IPv6 as its IPv4)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def check_url(url: str, *, allow_private: bool, resolver: Resolver = resolve) -> str:
    """Refuse a URL that cannot receive webhooks; the URL (stripped) otherwise.

    A name that does not resolve now is accepted (DNS may be down for a moment): every
    attempt resolves it again and the delivery log says what went wrong.
    """
    url = url.strip()
    parts = parse_url(url)
    if allow_private:
        return url
    host = parts.hostname or ""
    literal = _literal(host)
    try:
        addresses = [literal] if literal else resolver(host, port_of(parts))
    except (OSError, UnicodeError):
        return url
    if not all(is_public(a) for a in addresses):
        raise DestinationError(
            f"{host} is a private, loopback or link-local address: webhooks go to public "
            "addresses only (an operator may allow private ones with "
            "TRAINHUB_WEBHOOK_ALLOW_PRIVATE)."
        )
    return url


def public_addresses(
    parts: SplitResult, *, allow_private: bool, resolver: Resolver = resolve
) -> list[str]:
    """The addresses an attempt may connect to; raises when there are none (a name that
    does not resolve, or resolves to a non-public address)."""
    host = parts.hostname or ""
    literal = _literal(host)
    try:
        addresses = [literal] if literal else resolver(host, port_of(parts))
    except (OSError, UnicodeError) as exc:
        raise DestinationError(f"cannot resolve {host}") from exc
    if not allow_private and not all(is_public(a) for a in addresses):
        raise DestinationError(f"{host} resolves to a non-public address; refused")
    if not addresses:
        raise DestinationError(f"{host} has no address")
    return addresses
