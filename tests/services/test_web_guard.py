"""The address guard on its own: strict URL parsing, which addresses are public, the allow list."""

from __future__ import annotations

import ipaddress

import pytest

from panager.config import ConfigError, RuntimeConfig, Settings, load_runtime_config
from panager.services.web.guard import (
    AddressGuard,
    AllowList,
    Refused,
    embedded_ipv4,
    parse_url,
    refusal,
)
from tests.fakes.web_server import PUBLIC_IP, FakeDNS
from tests.runtime_helpers import write_config


@pytest.mark.parametrize(
    ("raw", "host"),
    [
        ("http://2130706433/", "127.0.0.1"),  # one decimal number
        ("http://0177.1/", "127.0.0.1"),  # octal, short form
        ("http://127.1/", "127.0.0.1"),  # short form
        ("http://0x7f.0.0.1/", "127.0.0.1"),  # hex part
        ("http://0x7f000001/", "127.0.0.1"),
        ("http://017700000001/", "127.0.0.1"),  # one octal number
        ("http://127.0.0.1./", "127.0.0.1"),  # trailing dot
        ("http://0/", "0.0.0.0"),
        ("http://134744072/", "8.8.8.8"),  # public addresses are read the same way
        ("http://[::ffff:127.0.0.1]/", "::ffff:7f00:1"),
        ("http://[0:0:0:0:0:0:0:1]:8080/x", "::1"),
        ("HTTPS://Example.COM/Path", "example.com"),
        ("http://bücher.example/", "xn--bcher-kva.example"),
    ],
)
def test_every_spelling_of_an_address_is_read_as_that_address(raw, host):
    assert parse_url(raw).host == host


def test_parsed_url_is_canonical():
    url = parse_url("http://0177.1:8080/a?q=ä&r=%2F#frag")
    assert str(url) == "http://127.0.0.1:8080/a?q=%C3%A4&r=%2F"
    assert url.port == 8080 and url.ip == ipaddress.ip_address("127.0.0.1")
    assert str(parse_url("https://example.com")) == "https://example.com/"
    assert str(parse_url("http://[::1]:81/")) == "http://[::1]:81/"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("http://a@127.0.0.1/", "user name or password"),
        ("http://user:pw@example.com/", "user name or password"),
        ("ftp://example.com/", "Only http and https"),
        ("file:///etc/passwd", "Only http and https"),
        ("javascript:alert(1)", "Not a web address"),
        ("example.com/page", "Not a web address"),
        ("http://exa mple.com/", "spaces"),
        ("http://example.com\\@127.0.0.1/", "backslashes"),
        ("http://127.0.0.1%2e/", "no valid host"),
        ("http://1.2.3.4.5/", "Invalid address"),
        ("http://256.1.1.1/", "Invalid address"),
        ("http://08.1/", "Invalid address"),  # not octal, not decimal
        ("http://[fe80::1%25eth0]/", "Invalid IPv6"),
        ("http://[::1/", "closing"),
        ("http://example.com:99999/", "Invalid port"),
        ("http://example.com:8o/", "Invalid port"),
        ("http:///path", "no valid host"),
        ("http://-bad-.example/", "Invalid host name"),
        ("http://example.com/" + "a" * 8_000, "too long"),
    ],
)
def test_malformed_urls_are_refused_with_the_reason(raw, says):
    with pytest.raises(Refused, match=says):
        parse_url(raw)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("192.168.1.1", "private"),
        ("172.16.0.1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("100.64.0.1", "not a globally routable"),  # carrier-grade NAT
        ("224.0.0.1", "multicast"),
        ("fc00::1", "private"),
        ("::ffff:127.0.0.1", "carrying 127.0.0.1"),  # IPv4-mapped
        ("::127.0.0.1", "carrying 127.0.0.1"),  # IPv4-compatible
        ("2002:a00:1::", "carrying 10.0.0.1"),  # 6to4
        ("64:ff9b::a9fe:a9fe", "carrying 169.254.169.254"),  # NAT64
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "carrying 127.0.0.1"),  # Teredo client
        ("64:ff9b:1::808:808", "local-use NAT64"),
    ],
)
def test_non_public_addresses_are_named(address, why):
    assert why in (refusal(ipaddress.ip_address(address)) or "")


@pytest.mark.parametrize(
    "address", ["8.8.8.8", PUBLIC_IP, "2606:4700::1111", "64:ff9b::808:808", "::ffff:8.8.8.8"]
)
def test_public_addresses_pass(address):
    assert refusal(ipaddress.ip_address(address)) is None


def test_embedded_ipv4_reads_every_carrier():
    teredo = ipaddress.IPv6Address("2001:0:4136:e378:8000:63bf:3fff:fdd2")
    assert ipaddress.IPv4Address("192.0.2.45") in embedded_ipv4(teredo)
    assert embedded_ipv4(ipaddress.IPv6Address("2002:c000:0204::1")) == [
        ipaddress.IPv4Address("192.0.2.4")
    ]


async def test_every_answer_must_be_public():
    dns = FakeDNS({"mixed.test": [PUBLIC_IP, "127.0.0.1"], "public.test": [PUBLIC_IP]})
    guard = AddressGuard(dns)
    with pytest.raises(Refused, match=r"mixed\.test resolves to 127\.0\.0\.1, which is a loopback"):
        await guard.check("http://mixed.test/")
    checked = await guard.check("https://public.test/x")
    assert [str(a) for a in checked.addresses] == [PUBLIC_IP]
    assert dns.calls == ["mixed.test", "public.test"]


async def test_address_literals_are_never_resolved():
    dns = FakeDNS({})
    with pytest.raises(Refused, match="loopback"):
        await AddressGuard(dns).check("http://2130706433/")
    assert dns.calls == []


async def test_unknown_hosts_are_refused_clearly():
    with pytest.raises(Refused, match=r"Could not find the host 'nowhere\.test'"):
        await AddressGuard(FakeDNS({})).check("http://nowhere.test/")


async def test_allow_list_admits_named_hosts_and_networks():
    dns = FakeDNS({"nas.home": ["192.168.1.20"], "printer.home": ["192.168.1.30"]})
    guard = AddressGuard(dns, AllowList.parse(["nas.home", "10.1.0.0/16", "127.0.0.1"]))
    assert (await guard.check("http://nas.home/")).addresses
    assert (await guard.check("http://10.1.2.3/")).addresses
    assert (await guard.check("http://127.1:8080/")).addresses
    with pytest.raises(Refused, match="web_fetch_allow"):
        await guard.check("http://printer.home/")
    with pytest.raises(Refused):
        await guard.check("http://10.2.0.1/")


def test_allow_list_rejects_nonsense():
    with pytest.raises(ValueError, match="not a host name"):
        AllowList.parse(["http://nas.home/"])


def test_config_reads_web_settings(tmp_path):
    home = write_config(
        tmp_path / "h",
        web_fetch_allow=["nas.home", "192.168.0.0/16", "::1"],
        web_search={"provider": "searxng", "url": "http://127.0.0.1:8888"},
    )
    config = load_runtime_config(Settings(_env_file=None, home=home))
    assert config.web_fetch and config.web_fetch_allow == ["nas.home", "192.168.0.0/16", "::1"]
    assert config.web_search is not None and config.web_search.provider == "searxng"
    brave = RuntimeConfig.model_validate({"web_search": {"provider": "brave"}}).web_search
    assert brave is not None and brave.api_key_env == "BRAVE_API_KEY"
    assert brave.url == "https://api.search.brave.com/res/v1/web/search"


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"web_fetch_allow": ["http://nas/"]}, "web_fetch_allow"),
        ({"web_search": {"provider": "searxng"}}, "searxng needs url"),
        ({"web_search": {"provider": "google"}}, "web_search.provider"),
        ({"web_search": {"provider": "brave", "url": "api.example"}}, "http:// or https://"),
    ],
)
def test_bad_web_settings_fail_with_one_line(tmp_path, values, says):
    home = write_config(tmp_path / "h", **values)
    with pytest.raises(ConfigError, match=says):
        load_runtime_config(Settings(_env_file=None, home=home))


# The guard's own table: one answer per address whatever Python's `ipaddress` thinks
# (3.11 calls fec0::/10 and 64:ff9b:1::/48 global; 3.12 changed several ranges).
TABLE = {
    # refused
    "fec0::1": "site-local", "fec0:1234::abcd": "site-local", "feff::1": "site-local",
    "64:ff9b:1::1": "local-use NAT64", "64:ff9b:1:ffff::8.8.8.8": "local-use NAT64",
    "fd12:3456::1": "private", "fe80::1": "link-local", "ff02::1": "multicast",
    "ff0e::1": "multicast", "100::1": "outside 2000::/3", "1::1": "outside 2000::/3",
    "4000::1": "outside 2000::/3", "e000::1": "outside 2000::/3",
    "2001:db8::1": "documentation", "3fff::1": "documentation", "3fff:fff::1": "documentation",
    "2001:2::1": "IETF protocol", "2001:10::1": "IETF protocol", "2001:1ff::1": "IETF protocol",
    "5f00::1": "outside 2000::/3", "2002:808:808::1": "6to4",
    "64:ff9b::7f00:1": "carrying 127.0.0.1", "64:ff9b::c0a8:101": "carrying 192.168.1.1",
    "::ffff:10.1.2.3": "carrying 10.1.2.3", "::ffff:0.0.0.0": "carrying 0.0.0.0",
    "192.0.0.1": "IETF protocol", "192.0.2.1": "documentation", "198.18.5.5": "benchmarking",
    "198.51.100.7": "documentation", "203.0.113.9": "documentation", "240.0.0.1": "reserved",
    "255.255.255.255": "broadcast", "192.88.99.1": "6to4", "0.1.2.3": "this network",
    "100.127.255.255": "carrier-grade", "172.31.255.255": "private", "127.255.0.1": "loopback",
    # public
    "2001:4860:4860::8888": None, "2606:4700:4700::1111": None, "2a00:1450::1": None,
    "3ffe::1": None, "3fff:1000::1": None, "2001:200::1": None, "2001:1::1": None,
    "2001:3::1": None, "2001:4:112::1": None, "2001:20::1": None, "64:ff9b::808:808": None,
    "64:ff9b::1.1.1.1": None, "::ffff:1.1.1.1": None, "192.0.0.9": None, "192.0.0.10": None,
    "8.8.4.4": None, "100.63.255.255": None, "100.128.0.0": None, "172.32.0.1": None,
    "198.20.0.1": None, "223.255.255.255": None,
}


def _answers() -> dict:
    return {a: refusal(ipaddress.ip_address(a)) for a in TABLE}


def test_the_guard_table_judges_every_address_by_itself():
    for address, expected in _answers().items():
        if TABLE[address] is None:
            assert expected is None, address
        else:
            assert expected is not None and TABLE[address] in expected, (address, expected)


def test_the_guard_table_does_not_ask_python(monkeypatch):
    """Every flag of `ipaddress` answering the opposite changes nothing: the same answers on
    3.11 and 3.12 (whose flags differ for these ranges)."""
    before = _answers()
    for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        for flag in ("is_global", "is_private", "is_reserved", "is_site_local", "is_link_local",
                     "is_loopback", "is_multicast", "is_unspecified"):
            if hasattr(cls, flag):
                original = getattr(cls, flag)
                monkeypatch.setattr(cls, flag, property(lambda self, o=original: not o.fget(self)))
    assert _answers() == before
