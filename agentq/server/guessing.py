"""Making token guessing slow: failed bearer tokens and console sign-ins are
counted per client address, and past a few an address is refused for a while.

Every authenticator that checks secrets (:class:`~agentq.server.auth.TokenAuth`)
keeps one :class:`GuessLimiter`, shared by the HTTP API, the MCP server and the
console's sign-in form it serves. The rule, per client address:

* the first :attr:`GuessLimiter.free` failures cost nothing (a typo, a rotated
  token);
* each failure after them locks the address out for a back-off that doubles,
  from :attr:`~GuessLimiter.first_delay` up to :attr:`~GuessLimiter.max_delay`
  seconds: while locked out, a request that carries a token is answered 429
  with ``Retry-After`` *without the token being checked*, so a right guess
  inside the lock-out is refused like a wrong one, and guessing faster gains
  nothing;
* an address with no failure for :attr:`~GuessLimiter.forget_after` seconds
  starts afresh. A success does not: otherwise an attacker holding one valid
  token could reset its count between guesses.

So from one address the steady guessing rate is one token per ``max_delay``
(60 s by default: 1,440 a day). IPv6 clients are counted per /64 network, the
block one subscriber usually holds. Behind a reverse proxy every client has the
proxy's address unless the server is told to trust its forwarded-for header.

At most :attr:`~GuessLimiter.max_addresses` addresses are remembered (those
seen least recently are forgotten first), so a flood of addresses cannot grow
memory.
"""

from __future__ import annotations

import ipaddress
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

from agentq.clock import Clock, SystemClock

__all__ = ["GuessLimiter", "retry_after"]


@dataclass
class _Failures:
    count: int
    last: float
    locked_until: float


class GuessLimiter:
    """Counts failed secrets per client address and locks guessers out (see the
    module docstring). Thread-safe: the console's sign-in runs on the event loop,
    the API's authentication too, but a test may call it from anywhere."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        free: int = 5,
        first_delay: float = 1.0,
        max_delay: float = 60.0,
        forget_after: float = 900.0,
        max_addresses: int = 10_000,
    ) -> None:
        if free < 0 or first_delay <= 0 or max_delay < first_delay or forget_after <= 0:
            raise ValueError("free >= 0, 0 < first_delay <= max_delay, forget_after > 0")
        if max_addresses < 1:
            raise ValueError("max_addresses must be at least 1")
        self.clock: Clock = clock or SystemClock()
        self.free = free
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.forget_after = forget_after
        self.max_addresses = max_addresses
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, _Failures] = OrderedDict()

    def wait_for(self, address: str | None) -> float:
        """Seconds ``address`` must wait before a secret of its is checked again
        (0: check it now)."""
        now = self.clock.monotonic()
        with self._lock:
            found = self._current(_bucket(address), now)
            return max(found.locked_until - now, 0.0) if found is not None else 0.0

    def failed(self, address: str | None) -> None:
        """Count a wrong secret from ``address``; past :attr:`free`, lock it out."""
        now = self.clock.monotonic()
        bucket = _bucket(address)
        with self._lock:
            found = self._current(bucket, now) or _Failures(0, now, now)
            found.count += 1
            found.last = now
            over = found.count - self.free
            if over > 0:
                # Doubling from first_delay; the exponent is capped so it cannot overflow.
                delay = min(self.first_delay * 2.0 ** min(over - 1, 64), self.max_delay)
                found.locked_until = now + delay
            self._seen[bucket] = found
            self._seen.move_to_end(bucket)
            while len(self._seen) > self.max_addresses:
                self._seen.popitem(last=False)

    def _current(self, bucket: str, now: float) -> _Failures | None:
        found = self._seen.get(bucket)
        if found is None:
            return None
        if now - found.last >= self.forget_after and now >= found.locked_until:
            del self._seen[bucket]
            return None
        return found


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))


def _bucket(address: str | None) -> str:
    """What failures are counted under: the IPv4 address, the IPv6 /64 network."""
    if not address:
        return "?"
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)
