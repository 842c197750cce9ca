"""Host allow-lists: which hosts, ports and addresses a tool's ``ctx.http`` (and
a completion webhook) may reach.

An entry of ``allowed_hosts`` is one of:

* ``api.example.com`` — that name, any port;
* ``*.example.com`` — its subdomains (not ``example.com`` itself), any port;
* ``api.example.com:443``, ``*.example.com:8443`` — only that port (a URL
  without a port has its scheme's, 80 or 443);
* ``203.0.113.7``, ``[2001:db8::1]``, ``10.0.0.5:8080`` — that address (an
  IPv6 address in brackets when a port follows);
* ``10.0.0.0/8``, ``fd00::/8`` — the addresses of that network, any port.

Two checks, both by the executor, never by the handler's code:

1. the URL's host and port must match an entry (:func:`host_allowed`);
2. every connection goes to an address that is *public*, or that the list
   names explicitly (:func:`address_allowed`): a name is resolved once and the
   connection made to the address checked (:mod:`agentq.http_guard`), so an
   allowed name whose DNS answers with loopback, private, link-local or other
   non-public space (the cloud metadata service at 169.254.169.254, the
   database on 10.0.0.5) is refused, and so is an answer that changes between
   the check and the connection (DNS rebinding). An IPv6 address that carries
   an IPv4 one (NAT64, 6to4, IPv4-compatible, SIIT) is judged by the IPv4
   address it leads to (:func:`embedded_ipv4`).

"Explicitly" means an address or network entry that contains the address
(``127.0.0.1``, ``10.0.0.0/8``), or the name ``localhost``, which names loopback
(127.0.0.0/8 and ::1) by definition. So ``allowed_hosts = ["127.0.0.1",
"localhost"]`` (the demo's) reaches the local machine, while ``["hooks.example.com"]``
reaches hooks.example.com only while it resolves to public addresses. An
address entry with a port allows that address on that port only.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "ALLOWED_HOSTS_EXTENSION",
    "HostEntry",
    "address_allowed",
    "default_port",
    "embedded_ipv4",
    "explicit_networks",
    "host_allowed",
    "is_public",
    "parse_host_entry",
]

#: The httpx request extension that carries a tool's ``allowed_hosts`` from its
#: client (:class:`agentq.http.PolicyTransport`) to the connections
#: (:class:`agentq.http_guard.GuardedTransport`).
ALLOWED_HOSTS_EXTENSION = "agentq.allowed_hosts"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAME = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: What ``localhost`` names: loopback, whatever a resolver says.
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
#: IPv6 forms with an IPv4 address in their last 32 bits: NAT64's well-known
#: prefix, IPv4-compatible (deprecated), SIIT's IPv4-translated.
_LAST_32_BITS = (
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("::/96"),
    ipaddress.IPv6Network("::ffff:0:0:0/96"),
)
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
#: NAT64's local-use prefix (RFC 8215): its IPv4 address sits where the
#: operator's prefix length puts it, so it is judged whole: never public.
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")


@dataclass(frozen=True)
class HostEntry:
    """One parsed ``allowed_hosts`` entry: a ``name`` (``*.`` for subdomains) or
    a ``network`` (an address is a network of one), and a ``port`` or None (any)."""

    name: str | None = None
    network: IPNetwork | None = None
    port: int | None = None

    def matches(self, host: str, port: int | None) -> bool:
        """Whether a URL's host and port are this entry's."""
        if self.port is not None and port != self.port:
            return False
        if self.network is not None:
            ip = _ip(host)
            return ip is not None and _unmapped(ip) in self.network
        assert self.name is not None
        if self.name.startswith("*."):
            return host.endswith(self.name[1:]) and host != self.name[2:]
        return host == self.name

    def explicit(self) -> tuple[IPNetwork, ...]:
        """The non-public space this entry allows by naming it."""
        if self.network is not None:
            return (self.network,)
        return LOOPBACK if self.name == "localhost" else ()


def parse_host_entry(text: str) -> HostEntry:
    """An ``allowed_hosts`` entry (see the module docstring); ValueError naming
    the entry and what is wrong otherwise."""
    entry = text.strip().lower().rstrip(".")
    host, port = entry, None
    if entry.startswith("["):  # [v6] or [v6]:port
        close = entry.find("]")
        rest = entry[close + 1 :] if close > 0 else "?"
        if close < 0 or (rest and not rest.startswith(":")):
            raise ValueError(f"invalid host pattern {text!r}: an IPv6 address is [address]:port")
        host, port = entry[1:close], _port(text, rest[1:]) if rest else None
    elif "/" in entry:
        try:
            return HostEntry(network=ipaddress.ip_network(entry, strict=False))
        except ValueError as exc:
            raise ValueError(f"invalid host pattern {text!r}: {exc}") from None
    elif entry.count(":") == 1:
        host, _, digits = entry.partition(":")
        port = _port(text, digits)
    ip = _ip(host)
    if ip is not None:
        return HostEntry(network=ipaddress.ip_network(_unmapped(ip)), port=port)
    if ":" in host or not _NAME.fullmatch(host):
        raise ValueError(
            f"invalid host pattern {text!r}: expected a name (api.example.com, "
            "*.example.com), an address (10.0.0.5, [::1]) or a network (10.0.0.0/8), "
            "with :port if only one port"
        )
    return HostEntry(name=host, port=port)


def host_allowed(host: str, patterns: Sequence[str], port: int | None = None) -> bool:
    """Whether a URL's ``host`` (and ``port``, None: not checked) matches one of
    ``allowed_hosts`` (entries already checked by the policy's validation)."""
    host = host.lower().rstrip(".").strip("[]")
    return any(_entry(p).matches(host, port) for p in patterns)


def default_port(scheme: str, port: int | None) -> int | None:
    """A URL's port, its scheme's when it names none."""
    return port if port is not None else _DEFAULT_PORTS.get(scheme)


def explicit_networks(patterns: Iterable[str]) -> tuple[tuple[IPNetwork, int | None], ...]:
    """The non-public space ``patterns`` allow by naming it, with each entry's port."""
    found: list[tuple[IPNetwork, int | None]] = []
    for pattern in patterns:
        entry = _entry(pattern)
        found.extend((network, entry.port) for network in entry.explicit())
    return tuple(sorted(set(found), key=str))


def is_public(address: IPAddress) -> bool:
    """Whether an address is public: globally routable unicast (not loopback,
    private, link-local, shared, reserved, unspecified or multicast). An IPv6
    address that carries an IPv4 address (:func:`embedded_ipv4`) is public only
    if that IPv4 address is; the local-use NAT64 prefix ``64:ff9b:1::/48`` never."""
    ip = _unmapped(address)
    if ip in _NAT64_LOCAL:
        return False
    inner = embedded_ipv4(ip)
    if inner is not None and not is_public(inner):
        return False
    return ip.is_global and not ip.is_multicast


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to, for the forms that carry one:
    NAT64 ``64:ff9b::/96`` (RFC 6052), 6to4 ``2002::/16`` (RFC 3056),
    IPv4-compatible ``::a.b.c.d`` and SIIT ``::ffff:0:a.b.c.d`` (RFC 6145)
    in their last 32 bits, 6to4 in bits 16-47. Python calls all of these global
    whatever they carry: the NAT64 form of 169.254.169.254 reaches the metadata
    service through the gateway. (IPv4-mapped ``::ffff:a.b.c.d`` is the IPv4
    address itself: :func:`_unmapped`.)"""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    value = int(address)
    if address in _SIX_TO_FOUR:
        return ipaddress.IPv4Address((value >> 80) & 0xFFFFFFFF)
    if any(address in net for net in _LAST_32_BITS):
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    return None


def address_allowed(
    address: str, port: int, explicit: Iterable[tuple[IPNetwork, int | None]]
) -> bool:
    """Whether a connection may go to ``address``:``port``: it is public, or one
    of the ``explicit`` networks (:func:`explicit_networks`) contains it, or
    contains the IPv4 address it carries (:func:`embedded_ipv4`)."""
    ip = _unmapped(ipaddress.ip_address(address.split("%", 1)[0]))
    if is_public(ip):
        return True
    inner = embedded_ipv4(ip)
    return any(
        (ip in net or (inner is not None and inner in net)) and (p is None or p == port)
        for net, p in explicit
    )


@functools.lru_cache(maxsize=4096)  # every request checks its tool's few entries
def _entry(pattern: str) -> HostEntry:
    try:
        return parse_host_entry(pattern)
    except ValueError:
        return HostEntry(name="\x00")  # matches nothing (validation reported it)


def _ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _unmapped(ip: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address (::ffff:127.0.0.1) as the IPv4 address it is."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _port(text: str, digits: str) -> int:
    if not digits.isdigit() or not 0 < int(digits) < 65536:
        raise ValueError(f"invalid host pattern {text!r}: the port must be 1-65535")
    return int(digits)
