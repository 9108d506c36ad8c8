"""Where a person's calendars are: from an address (`anna@example.org`) or a URL (RFC 6764).

What the person types in "Server address" decides where Panager starts:

- **A URL** (`https://cloud.example.org/remote.php/dav/`) is used as it is; for a bare
  origin (`https://host/`) `/.well-known/caldav` is asked first (`dav.CalDav.principal`).
- **An address** — `anna@example.org`, or just `example.org` — is looked up in DNS:
  the `_caldavs._tcp.example.org` SRV record (https), else `_caldav._tcp.example.org`
  (plain http), with the context path from the same name's TXT record (`path=/dav/`),
  else the target's `/.well-known/caldav`. No SRV record: `https://example.org/`, its
  `/.well-known/caldav` first, then the address itself.

An SRV answer is outside input, like an `href`:

- its target goes through the address guard before anything connects (a target at
  127.0.0.1, 169.254.169.254 or a private address is refused unless the operator listed
  it in `web_fetch_allow`), and then through the door on every request as usual;
- the password goes to the target only when it is under the address's registrable domain
  (`_caldavs._tcp.example.org` → `caldav.example.org`). A target elsewhere
  (`caldav.hoster.net`, as a provider serving many domains would answer) is not contacted
  at all: DNS alone does not decide who gets a password, so the person is asked to enter
  that server's address themselves;
- `_caldav._tcp` (plain http) is accepted only where the door accepts plain http
  (loopback, or a host in `web_fetch_allow`).

The resolver is dnspython's, reading the system's configuration; tests point it at a DNS
server of their own on a loopback port (`DnsSettings`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import dns.asyncresolver
import dns.exception
import dns.rdatatype
import dns.resolver

from panager.providers.caldav.door import CalDavError, registrable_domain
from panager.services.web.guard import AddressGuard, Refused, parse_url

SERVICES = (("_caldavs._tcp", "https"), ("_caldav._tcp", "http"))
_DOMAIN = re.compile(r"^[a-z0-9_.-]+$")


@dataclass(frozen=True)
class DnsSettings:
    """Which DNS server answers the SRV and TXT lookups; empty `nameservers`: the system's."""

    nameservers: tuple[str, ...] = ()
    port: int = 53
    lifetime: float = 5.0  # seconds for one lookup, every retry included


class DnsUnanswered(CalDavError):
    """The DNS server did not answer (time-out, or every server failed)."""


@dataclass(frozen=True)
class Found:
    """Where an SRV record says the CalDAV server is."""

    url: str  # https://caldav.example.org:443/dav/ (path "/" when no TXT path was given)
    record: str  # _caldavs._tcp.example.org, to name in messages


def address_domain(entered: str) -> str | None:
    """`example.org` for `anna@example.org` or `example.org`; None for a URL (or nothing
    that looks like a domain)."""
    text = entered.strip().lower().rstrip(".")
    if "://" in text or "/" in text:
        return None
    domain = text.rpartition("@")[2]
    if not domain or "." not in domain or not _DOMAIN.match(domain):
        return None
    if domain.rsplit(".", 1)[1].isdigit():
        return None  # an IPv4 address, not a domain with DNS records
    return domain


def _same_site(target: str, domain: str) -> bool:
    """May the password typed for `domain` go to `target`? Same registrable domain, or, for
    a name without a public suffix (`nas.home`), the name itself or one under it."""
    if target == domain or target.endswith("." + domain):
        return True
    site = registrable_domain(domain)
    return site is not None and registrable_domain(target) == site


def _resolver(settings: DnsSettings) -> dns.asyncresolver.Resolver:
    if settings.nameservers:
        resolver = dns.asyncresolver.Resolver(configure=False)
        resolver.nameservers = list(settings.nameservers)
    else:
        resolver = dns.asyncresolver.Resolver()
    resolver.port = settings.port
    resolver.lifetime = settings.lifetime
    resolver.timeout = settings.lifetime
    return resolver


async def _answer(
    resolver: dns.asyncresolver.Resolver, name: str, kind: dns.rdatatype.RdataType
) -> list[Any]:
    """The records of `name`, [] when there are none; DnsUnanswered when DNS is silent."""
    try:
        answer = await resolver.resolve(name, kind, search=False)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return []
    except (dns.exception.Timeout, dns.resolver.NoNameservers):
        raise DnsUnanswered(
            f"The DNS server did not answer the lookup of {name}. Try again later, or enter "
            "the calendar server's full address (https://…) instead."
        ) from None
    return list(answer)


def _context_path(records: list[Any]) -> str:
    """RFC 6764 §4: a TXT string `path=/dav/` gives the context path; "/" otherwise."""
    for record in records:
        for raw in record.strings:
            text = raw.decode("utf-8", errors="replace").strip()
            if text.lower().startswith("path="):
                path = text[5:].strip()
                if path.startswith("/") and not path.startswith("//"):
                    return path
    return "/"


async def lookup(domain: str, settings: DnsSettings) -> Found | None:
    """The SRV record's server for `domain` (https first), or None when there is none.

    DnsUnanswered when DNS does not answer; CalDavError when the record names a server
    outside the domain (no connection is made)."""
    try:
        resolver = _resolver(settings)
    except dns.resolver.NoResolverConfiguration:
        return None  # no DNS configured here: the well-known address is tried instead
    for service, scheme in SERVICES:
        record = f"{service}.{domain}"
        found = [r for r in await _answer(resolver, record, dns.rdatatype.SRV)
                 if str(r.target) != "."]  # "." : the service is decidedly not offered
        if not found:
            continue
        best = min(found, key=lambda r: (r.priority, -r.weight))
        target = str(best.target).rstrip(".").lower()
        path = _context_path(await _answer(resolver, record, dns.rdatatype.TXT))
        try:
            url = parse_url(f"{scheme}://{target}:{best.port}{path}")
        except Refused:
            raise CalDavError(f"The DNS record {record} names an invalid server; enter the "
                              "calendar server's full address instead.") from None
        return Found(str(url), record)
    return None


async def starting_points(
    entered: str, guard: AddressGuard, settings: DnsSettings
) -> list[tuple[str, str | None]]:
    """The URLs to try in order, each with the SRV record it came from (None: typed).

    A URL is tried as it is. An address: its SRV server (checked by the guard now, and
    refused when outside the address's domain), then `https://<domain>/` (its
    `/.well-known/caldav` first)."""
    domain = address_domain(entered)
    if domain is None:
        return [(entered, None)]
    fallback = str(parse_url(f"https://{domain}/"))
    found = await lookup(domain, settings)
    if found is None:
        return [(fallback, None)]
    target = parse_url(found.url)
    try:
        await guard.check(target)
    except Refused as exc:
        raise Refused(f"{found.record} names {target.host} as the calendar server: {exc}") \
            from None
    if not _same_site(target.host, domain):
        raise CalDavError(
            f"{found.record} names {target.host}, which is not under {domain}; Panager does "
            f"not send your password to another domain on the word of DNS alone. If that is "
            f"your provider's server, enter {target.scheme}://{target.host}/ as the server "
            "address."
        )
    return [(found.url, found.record), (fallback, None)]
