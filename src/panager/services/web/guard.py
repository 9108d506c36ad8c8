# Over 400 lines, kept whole: the address guard stays in one module on purpose: one place to audit
# what web_fetch may reach (docs/security.md).
"""The address guard: which URLs a fetch may reach, and the one place that decides it.

A fetch tool is the classic way into a server's private network (cloud metadata
at 169.254.169.254, the home router, the database next door). Every address a
fetch connects to passes through this module, on every redirect hop:

1. **Strict parsing** (`parse_url`): http and https only; no userinfo
   (`http://a@127.0.0.1/`); no whitespace, control characters, backslashes or
   percent signs in the host. A host that ends in a number is read as IPv4 the
   way browsers read it (`2130706433`, `0177.1`, `127.1`, `0x7f.1` are all
   127.0.0.1), so every spelling of an address is judged as that address.
2. **Resolution through an injectable resolver**, and refusal unless *every*
   A/AAAA answer is globally routable, by this module's own table (the same
   answers on every Python version): IPv4 minus IANA's special ranges; IPv6 only
   inside 2000::/3, minus the special ranges listed there (fec0::/10,
   64:ff9b:1::/48, ULA, link-local, multicast all refused). IPv4 carried inside
   IPv6 — IPv4-mapped, IPv4-compatible, 6to4, NAT64 (64:ff9b::/96) and Teredo —
   is judged as that IPv4 address (64:ff9b::/96 passes when that address does).
3. **Pinning**: the connection goes to an address that was checked, never to
   a second lookup of the name (`PinnedBackend`, httpcore's network-backend
   seam). The URL keeps the name, so TLS verifies the certificate for the name
   and SNI and the Host header carry it, while the socket goes to the checked
   IP: no DNS rebinding between check and connect.

`web_fetch_allow` (YAML) lets an operator reach chosen hosts or networks, such
as a home server: a host name entry allows that name whatever it resolves to;
an IP or CIDR entry allows those addresses under any name.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpcore
import idna

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str], Awaitable[Sequence[str]]]  # host name -> IP address strings
Dialer = Callable[[str, int], tuple[str, int]]  # checked (ip, port) -> where to connect

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([^#]*)(?:#.*)?$", re.DOTALL)
_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f\\]")
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_PATH_SAFE = "!$&'()*+,/:;=?@[]~%-._"
DEFAULT_PORTS = {"http": 80, "https": 443}
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
MAX_URL_CHARS = 8_000
ALLOW_HINT = "an operator can allow it with web_fetch_allow in the config"


class WebError(Exception):
    """A fetch or search that could not be done; the message is for the model and the person.

    `outside` is True when the message quotes what a remote server sent (a redirect
    target, a content type): the tool then frames it as outside content."""

    def __init__(self, message: str, *, outside: bool = False) -> None:
        super().__init__(message)
        self.outside = outside


class Refused(WebError):
    """The guard refused a URL or address; nothing was connected."""


@dataclass(frozen=True)
class ParsedURL:
    """A URL as the guard understood it: canonical host (IDNA ASCII or IP text), port, target."""

    scheme: str
    host: str  # lower-case ASCII name, or an IP address without brackets
    port: int
    target: str  # path and query, percent-encoded ASCII, starting with "/"
    ip: Address | None = None  # set when the host is an address literal

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if self.port == DEFAULT_PORTS[self.scheme] else f":{self.port}"
        return f"{self.scheme}://{host}{port}{self.target}"


def parse_url(raw: str) -> ParsedURL:
    """Parse `raw` strictly, or raise `Refused` saying what is wrong with it."""
    text = raw.strip() if isinstance(raw, str) else ""
    if len(text) > MAX_URL_CHARS:
        raise Refused(f"The URL is too long ({len(text):,} characters; at most {MAX_URL_CHARS:,}).")
    if _FORBIDDEN_CHARS.search(text):
        raise Refused("The URL holds spaces, control characters or backslashes; give a plain URL.")
    match = _URL.match(text)
    if match is None:
        raise Refused(f"Not a web address: {text[:200]!r}; give a full http:// or https:// URL.")
    scheme, authority, target = match.group(1).lower(), match.group(2), match.group(3)
    if scheme not in DEFAULT_PORTS:
        raise Refused(f"Only http and https URLs can be fetched (not {scheme}:).")
    if "@" in authority:
        raise Refused("URLs with a user name or password (user@host) are refused.")
    host_text, port = _split_port(authority, DEFAULT_PORTS[scheme])
    host, ip = _canonical_host(host_text)
    if not target.startswith("/"):
        target = "/" + target
    return ParsedURL(scheme, host, port, quote(target, safe=_PATH_SAFE), ip)


def _split_port(authority: str, default: int) -> tuple[str, int]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise Refused("The URL's IPv6 address is missing its closing ']'.")
        host, rest = authority[: end + 1], authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise Refused("Unexpected text after the URL's IPv6 address.")
        port_text = rest[1:] if rest else ""
    else:
        host, _, port_text = authority.partition(":")
    if not port_text:
        return host, default
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise Refused(f"Invalid port {port_text[:20]!r} in the URL.")
    return host, int(port_text)


def _canonical_host(text: str) -> tuple[str, Address | None]:
    if text.startswith("["):
        try:
            if "%" in text:  # a zone id ("%25eth0") names this machine's interface
                raise ValueError(text)
            ip6 = ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            raise Refused(f"Invalid IPv6 address {text[:60]!r} in the URL.") from None
        return str(ip6), ip6
    host = text.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or "%" in host:
        raise Refused("The URL has no valid host name.")
    if _ends_in_number(host):
        ip4 = _parse_ipv4(host)
        return str(ip4), ip4
    try:
        ascii_host = idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        raise Refused(f"Invalid host name {host[:100]!r}.") from None
    labels = ascii_host.split(".")
    if len(ascii_host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise Refused(f"Invalid host name {host[:100]!r}.")
    return ascii_host, None


def _ends_in_number(host: str) -> bool:
    """The WHATWG URL rule: a host whose last label is a number is an IPv4 address."""
    last = host.split(".")[-1]
    return last.isascii() and (last.isdigit() or _ipv4_number(last) is not None)


def _ipv4_number(part: str) -> int | None:
    try:
        if part[:2].lower() == "0x":
            return int(part[2:], 16) if part[2:] else 0
        if len(part) > 1 and part.startswith("0"):
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None


def _parse_ipv4(host: str) -> ipaddress.IPv4Address:
    """Browsers' IPv4 parsing: 1-4 parts, each decimal, octal (0…) or hex (0x…)."""
    parts = host.split(".")
    numbers = [_ipv4_number(p) if p.isascii() and p else None for p in parts]
    if len(parts) > 4 or any(n is None for n in numbers):
        raise Refused(f"Invalid address {host[:60]!r} in the URL.")
    values = [n for n in numbers if n is not None]
    head, last = values[:-1], values[-1]
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(values)):
        raise Refused(f"Invalid address {host[:60]!r} in the URL.")
    number = last + sum(n << (8 * (3 - i)) for i, n in enumerate(head))
    return ipaddress.IPv4Address(number)


# -- which addresses are public --------------------------------------------------------------


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries (mapped, compatible, 6to4, NAT64, Teredo)."""
    found: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if (ip in IPV4_COMPATIBLE and int(ip) > 1) or ip in NAT64:  # :: and ::1 are themselves
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)  # (server, client)
    return found


# The guard's own table, so the answers do not depend on the Python version (3.11's
# `ipaddress` calls fec0::/10 and 64:ff9b:1::/48 global; 3.12 changed several ranges).
# IANA's special-purpose registries; first match wins, so narrower exceptions come first.
_V4_SPECIAL: tuple[tuple[str, str | None], ...] = (
    ("0.0.0.0/32", "the unspecified address (this machine)"),
    ("0.0.0.0/8", "a reserved 'this network' address"),
    ("127.0.0.0/8", "a loopback address (this machine)"),
    ("169.254.0.0/16", "a link-local address (such as cloud metadata at 169.254.169.254)"),
    ("10.0.0.0/8", "a private network address"),
    ("172.16.0.0/12", "a private network address"),
    ("192.168.0.0/16", "a private network address"),
    ("100.64.0.0/10", "not a globally routable address (carrier-grade NAT)"),
    ("192.0.0.9/32", None),  # port control anycast: global
    ("192.0.0.10/32", None),  # TURN anycast: global
    ("192.0.0.0/24", "not a globally routable address (IETF protocol assignments)"),
    ("192.0.2.0/24", "not a globally routable address (documentation)"),
    ("198.51.100.0/24", "not a globally routable address (documentation)"),
    ("203.0.113.0/24", "not a globally routable address (documentation)"),
    ("192.88.99.0/24", "not a globally routable address (retired 6to4 relay)"),
    ("198.18.0.0/15", "not a globally routable address (benchmarking)"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "not a globally routable address (reserved)"),
)
# IPv6: only global unicast (2000::/3) can be public, minus these ranges inside it.
IPV6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_V6_SPECIAL: tuple[tuple[str, str | None], ...] = (
    ("2001:1::1/128", None),  # port control anycast
    ("2001:1::2/128", None),  # TURN anycast
    ("2001:3::/32", None),  # AMT
    ("2001:4:112::/48", None),  # AS112-v6
    ("2001:20::/28", None),  # ORCHIDv2
    ("2001:30::/28", None),  # drone remote ID
    ("2001::/23", "not a globally routable address (IETF protocol assignments)"),
    ("2001:db8::/32", "not a globally routable address (documentation)"),
    ("2002::/16", "not a globally routable address (6to4)"),
    ("3fff::/20", "not a globally routable address (documentation)"),
)
_V6_OUTSIDE: tuple[tuple[str, str], ...] = (  # named reasons for common ranges outside 2000::/3
    ("::/128", "the unspecified address (this machine)"),
    ("::1/128", "a loopback address (this machine)"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("fc00::/7", "a private network address (unique local)"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a private network address (deprecated site-local)"),
    ("ff00::/8", "a multicast address"),
)


def _table(rows: Sequence[tuple[str, str | None]]) -> tuple[tuple[Network, str | None], ...]:
    return tuple((ipaddress.ip_network(net), why) for net, why in rows)


V4_TABLE = _table(_V4_SPECIAL)
V6_TABLE = _table(_V6_SPECIAL)
V6_OUTSIDE = _table(_V6_OUTSIDE)


def refusal(ip: Address) -> str | None:
    """Why `ip` is not a public destination, or None when it is globally routable."""
    if isinstance(ip, ipaddress.IPv6Address):
        for inner in embedded_ipv4(ip):
            why = _kind4(inner)
            if why:
                return f"an IPv6 address carrying {inner}, {why}"
        if ip.ipv4_mapped is not None or ip in NAT64:
            return None  # judged by the IPv4 address inside (DNS64 needs NAT64)
        return _kind6(ip)
    return _kind4(ip)


def _first(ip: Address, table: tuple[tuple[Network, str | None], ...]) -> tuple[bool, str | None]:
    for network, why in table:
        if ip in network:
            return True, why
    return False, None


def _kind4(ip: ipaddress.IPv4Address) -> str | None:
    if ip == ipaddress.IPv4Address("255.255.255.255"):
        return "the broadcast address"
    return _first(ip, V4_TABLE)[1]


def _kind6(ip: ipaddress.IPv6Address) -> str | None:
    if ip not in IPV6_GLOBAL_UNICAST:
        found, why = _first(ip, V6_OUTSIDE)
        return why if found else "not a globally routable address (outside 2000::/3)"
    return _first(ip, V6_TABLE)[1]


# -- the allow list --------------------------------------------------------------------------


@dataclass(frozen=True)
class AllowList:
    """Hosts and networks an operator lets web_fetch reach although they are not public."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """Entries are host names, IP addresses or CIDR networks; raise ValueError on others."""
        hosts: set[str] = set()
        networks: list[Network] = []
        for entry in entries:
            text = str(entry).strip().lower()
            try:
                networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            try:
                host, ip = _canonical_host(text)
            except Refused:
                raise ValueError(f"{entry!r} is not a host name, IP address or CIDR") from None
            if ip is not None:
                networks.append(ipaddress.ip_network(ip))
            else:
                hosts.add(host)
        return cls(frozenset(hosts), tuple(networks))

    def permits(self, host: str, ip: Address) -> bool:
        """Whether the operator allowed this host name or this address."""
        return host in self.hosts or any(ip in net for net in self.networks)


# -- the check -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckedTarget:
    """A URL whose every address passed the guard; connect only to `addresses`."""

    url: ParsedURL
    addresses: tuple[Address, ...]


async def system_resolver(host: str) -> list[str]:
    """The operating system's A/AAAA answers for `host`."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


@dataclass
class AddressGuard:
    """Checks URLs against the rules above; `resolver` is injected in tests."""

    resolver: Resolver = system_resolver
    allow: AllowList = field(default_factory=AllowList)

    async def check(self, raw_url: str | ParsedURL) -> CheckedTarget:
        """Parse and resolve `raw_url`; raise `Refused` unless every address may be reached."""
        url = raw_url if isinstance(raw_url, ParsedURL) else parse_url(raw_url)
        addresses = (url.ip,) if url.ip is not None else await self._resolve(url.host)
        for ip in addresses:
            why = None if self.allow.permits(url.host, ip) else refusal(ip)
            if why:
                shown = url.host if url.ip is not None else f"{url.host} resolves to {ip}, which"
                raise Refused(
                    f"Refused to fetch {url}: {shown} is {why}. web_fetch reaches only public "
                    f"addresses; {ALLOW_HINT}."
                )
        return CheckedTarget(url, addresses)

    async def _resolve(self, host: str) -> tuple[Address, ...]:
        try:
            answers = await self.resolver(host)
        except (OSError, UnicodeError):
            raise Refused(f"Could not find the host {host!r} (DNS lookup failed).") from None
        addresses: list[Address] = []
        for answer in answers:
            try:
                ip = ipaddress.ip_address(str(answer).split("%", 1)[0])
            except ValueError:
                raise Refused(f"The host {host!r} resolved to something unusable.") from None
            if ip not in addresses:
                addresses.append(ip)
        if not addresses:
            raise Refused(f"Could not find the host {host!r} (no addresses).")
        return tuple(addresses)


# -- connecting to the checked address -------------------------------------------------------


def direct(ip: str, port: int) -> tuple[str, int]:
    """The production dialer: connect to the checked address itself."""
    return ip, port


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting each (host, port) only to its checked addresses.

    httpcore asks the backend to open a TCP stream to the URL's host; instead of
    resolving the name again, this backend dials an address the guard checked for
    it (`pin`). A host that was never checked is refused: nothing here resolves."""

    def __init__(self, dial: Dialer = direct, inner: httpcore.AsyncNetworkBackend | None = None):
        self._dial = dial
        self._inner = inner or httpcore.AnyIOBackend()
        self._pins: dict[tuple[str, int], tuple[Address, ...]] = {}

    def pin(self, target: CheckedTarget) -> None:
        """Connections to this target's host and port go to its checked addresses."""
        self._pins[(target.url.host, target.url.port)] = target.addresses

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Open a stream to the first checked address of `host` that accepts."""
        addresses = self._pins.get((host.strip("[]"), port))
        if not addresses:
            raise httpcore.ConnectError(f"{host}:{port} was not checked by the address guard")
        error: Exception | None = None
        for ip in addresses:
            dial_host, dial_port = self._dial(str(ip), port)
            try:
                return await self._inner.connect_tcp(
                    dial_host, dial_port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Never used: fetches go over TCP only."""
        raise httpcore.ConnectError("unix sockets are not reachable through web_fetch")

    async def sleep(self, seconds: float) -> None:
        """Delegate to the wrapped backend."""
        await self._inner.sleep(seconds)
