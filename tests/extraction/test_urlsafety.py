"""The URL guard (`extraction.urlsafety`) against each address class, translation prefix and
spelling of a non-public address, and the exceptions settings allow."""

import socket

import pytest

from extraction.urlsafety import UnsafeURLError, check_public_url


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/x",
        "http://localhost/x",
        "http://10.0.0.5/x",
        "http://172.16.3.4/x",
        "http://192.168.1.1/x",
        "http://169.254.169.254/latest",
        "http://224.0.0.1/x",
        "http://240.0.0.1/x",
        "http://0.0.0.0/x",
        "http://[::1]/x",
        "http://[fc00::1]/x",
        "http://[fe80::1]/x",
        "http://[::127.0.0.1]/x",
        "http://[::ffff:127.0.0.1]/x",
        "http://[64:ff9b::a00:1]/x",
        "http://[2002:a00:1::]/x",
        "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/x",
        "ftp://93.184.216.34/x",
        "file:///etc/passwd",
        "http:///nohost",
    ],
)
def test_ssrf_guard_refuses_each_address_class(url, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    with pytest.raises(UnsafeURLError):
        check_public_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://[64:ff9b:1::a00:1]/x",  # local-use NAT64: its translator is the operator's
        "http://[64:ff9b:1::5db8:d822]/x",
        "http://[::ffff:0:a00:1]/x",  # SIIT's IPv4-translated addresses
        "http://[::ffff:0:5db8:d822]/x",
        "http://[4000::1]/x",  # reserved
        "http://[5f00::1]/x",
        "http://[fec0::1]/x",  # deprecated site-local
        "http://[3fff::1]/x",  # documentation
        "http://[2002:5db8:d822::1]/x",  # 6to4: not globally reachable (IANA)
        "http://[100::1]/x",  # discard-only
        "http://[::5db8:d822]/x",  # IPv4-compatible, deprecated
        "http://100.64.0.1/x",
    ],
)
def test_ssrf_guard_refuses_translation_prefixes_and_reserved_ranges(url, settings):
    # Python 3.11.7 calls most of these global (CVE-2024-4032): the guard's own table decides.
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    with pytest.raises(UnsafeURLError, match="non-public"):
        check_public_url(url)


@pytest.mark.parametrize(
    "address", ["64:ff9b::5db8:d822", "::ffff:5db8:d822", "2606:2800:220:1:248:1893:25c8:1946"]
)
def test_ssrf_guard_allows_public_ipv4_behind_the_well_known_prefixes(address, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    assert check_public_url(f"https://[{address}]/hook") == [address]


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("http://169.254.169.254/latest", "link-local"),
        ("http://[fe80::1]/x", "link-local"),
        ("http://10.0.0.5/x", "private"),
        ("http://127.0.0.1/x", "loopback"),
    ],
)
def test_ssrf_guard_names_the_address_class(url, named, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    with pytest.raises(UnsafeURLError, match=rf"non-public address \({named}\)"):
        check_public_url(url)


def test_ssrf_guard_reads_a_plain_ip_address_without_a_look_up(settings, monkeypatch):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    asked = []
    real = socket.getaddrinfo
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda host, *a, **k: asked.append(host) or real(host, *a, **k)
    )
    assert check_public_url("https://93.184.216.34/a.pdf") == ["93.184.216.34"]
    assert check_public_url("https://[2606:2800:220:1:248:1893:25c8:1946]/a") == [
        "2606:2800:220:1:248:1893:25c8:1946"
    ]
    with pytest.raises(UnsafeURLError, match="non-public"):
        check_public_url("http://[::ffff:127.0.0.1]/x")
    assert asked == []
    # Other spellings of an address are the resolver's to read, and are checked as it reads them.
    for url in ("http://127.1/x", "http://0x7f.0.0.1/x", "http://2130706433/x"):
        with pytest.raises(UnsafeURLError, match="loopback"):
            check_public_url(url)
    assert asked == ["127.1", "0x7f.0.0.1", "2130706433"]


def test_ssrf_guard_allows_public_addresses_and_configured_exceptions(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    check_public_url("https://93.184.216.34/hook")
    settings.OUTBOUND_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    check_public_url("http://10.0.0.5/hook")
    settings.OUTBOUND_ALLOWED_HOSTS = ["internal.example"]
    check_public_url("http://internal.example/hook")


def test_ssrf_guard_allows_an_origin_exactly_not_its_host_or_network(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    settings.OUTBOUND_ALLOWED_ORIGINS = ["http://127.0.0.1:8765"]
    assert check_public_url("http://127.0.0.1:8765/_sandbox/webhooks") is None
    for other in (
        "http://127.0.0.1:8000/admin/",
        "https://127.0.0.1:8765/",
        "http://127.0.0.2:8765/",
    ):
        with pytest.raises(UnsafeURLError, match="loopback"):
            check_public_url(other)
