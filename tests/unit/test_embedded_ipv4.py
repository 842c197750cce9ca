"""IPv6 addresses that carry an IPv4 address (issue 40 item 15): the outgoing
guard judges the IPv4 address inside, so a NAT64, 6to4, IPv4-compatible or SIIT
form of 169.254.169.254 (the cloud's metadata service) is as refused as the
address itself, and the same forms of a public address stay allowed."""

from __future__ import annotations

import ipaddress

import pytest

from agentq.policies.hosts import address_allowed, explicit_networks, is_public


#: Each form that embeds an IPv4 address, as a function of that address.
def _six_to_four(v4: str) -> str:
    return str(ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(v4)) << 80) | 1))


FORMS = {
    "NAT64 64:ff9b::/96": lambda v4: f"64:ff9b::{v4}",
    "6to4 2002::/16": _six_to_four,
    "IPv4-compatible ::/96": lambda v4: f"::{v4}",
    "SIIT ::ffff:0:0:0/96": lambda v4: f"::ffff:0:{v4}",
}
NOT_PUBLIC = ["169.254.169.254", "127.0.0.1", "10.0.0.5", "192.168.1.1", "100.64.0.1", "0.0.0.0"]


@pytest.mark.parametrize("inner", NOT_PUBLIC)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_an_ipv6_form_of_a_non_public_ipv4_address_is_not_public(form: str, inner: str) -> None:
    address = FORMS[form](inner)
    assert not is_public(ipaddress.ip_address(address)), address
    assert not address_allowed(address, 80, ()), address


@pytest.mark.parametrize("form", sorted(FORMS))
def test_an_ipv6_form_of_a_public_ipv4_address_stays_allowed(form: str) -> None:
    address = FORMS[form]("8.8.8.8")
    assert address_allowed(address, 443, ()), address


def test_the_local_use_nat64_prefix_is_not_public() -> None:
    """64:ff9b:1::/48 (RFC 8215) is local use: where its IPv4 address sits
    depends on the operator's prefix length, and it is not globally reachable."""
    for address in ("64:ff9b:1::a9fe:a9fe", "64:ff9b:1:a9fe:a9:fe00::", "64:ff9b:1::808:808"):
        assert not address_allowed(address, 80, ()), address


@pytest.mark.parametrize("form", sorted(FORMS))
def test_an_explicit_ipv4_network_allows_its_embedded_forms(form: str) -> None:
    address = FORMS[form]("10.0.0.5")
    assert address_allowed(address, 80, explicit_networks(["10.0.0.0/8"]))
    assert not address_allowed(address, 80, explicit_networks(["192.168.0.0/16"]))


def test_an_explicit_ipv6_network_allows_its_addresses() -> None:
    assert address_allowed("64:ff9b::a00:5", 80, explicit_networks(["64:ff9b::/96"]))
