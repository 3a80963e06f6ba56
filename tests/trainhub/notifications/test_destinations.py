"""Where webhooks may point (SSRF): public addresses only unless the operator allows
private ones, no credentials, http or https; checked on save and on every attempt."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from trainhub.notifications.destinations import (
    DestinationError,
    Resolver,
    check_url,
    is_public,
    public_addresses,
)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.215.14", True),
        ("2606:2800:21f:cb07:6820:80da:af6b:8b2c", True),
        ("127.0.0.1", False),
        ("10.0.0.1", False),
        ("172.16.5.4", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.64.0.1", False),  # shared (CGNAT)
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("::1", False),
        ("fe80::1%eth0", False),
        ("fd00::1", False),
        ("::ffff:10.0.0.1", False),
        ("::ffff:93.184.215.14", True),
    ],
)
def test_public_addresses_are_told_from_the_rest(address: str, public: bool) -> None:
    assert is_public(address) is public


def _resolving(*addresses: str) -> Resolver:
    return lambda host, port: list(addresses)


def test_a_name_that_resolves_to_a_private_address_is_refused() -> None:
    with pytest.raises(DestinationError, match=r"internal\.example is a private"):
        check_url(
            "https://internal.example/x", allow_private=False, resolver=_resolving("10.1.1.1")
        )
    mixed = _resolving("93.184.215.14", "127.0.0.1")  # one bad address is enough
    with pytest.raises(DestinationError):
        check_url("https://both.example/x", allow_private=False, resolver=mixed)
    public = _resolving("93.184.215.14")
    assert check_url(" https://ok.example/x ", allow_private=False, resolver=public) == (
        "https://ok.example/x"
    )


def test_a_name_that_does_not_resolve_now_is_taken_and_checked_at_each_attempt() -> None:
    def down(host: str, port: int) -> list[str]:
        raise OSError("no DNS")

    assert check_url("https://later.example/x", allow_private=False, resolver=down)
    with pytest.raises(DestinationError, match=r"cannot resolve later\.example"):
        public_addresses(urlsplit("https://later.example/x"), allow_private=False, resolver=down)


def test_every_attempt_refuses_a_name_that_now_resolves_to_a_private_address() -> None:
    parts = urlsplit("https://rebind.example/x")
    assert public_addresses(parts, allow_private=False, resolver=_resolving("93.184.215.14"))
    with pytest.raises(DestinationError, match="non-public"):
        public_addresses(parts, allow_private=False, resolver=_resolving("127.0.0.1"))
    assert public_addresses(parts, allow_private=True, resolver=_resolving("127.0.0.1")) == [
        "127.0.0.1"
    ]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://ok.example/", "http:// or https://"),
        ("https:///path", "names no host"),
        ("https://u:p@ok.example/", "credentials"),
        ("https://ok.example:99999/", "port"),
        ("https://ok.example/a b", "spaces"),
        ("https://ok.example/" + "a" * 2000, "2000"),
    ],
)
def test_malformed_urls_say_what_to_change(url: str, says: str) -> None:
    with pytest.raises(DestinationError, match=says):
        check_url(url, allow_private=True, resolver=_resolving("93.184.215.14"))
