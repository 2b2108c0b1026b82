"""A guard against server-side request forgery for URLs that clients give us (a job's
`source_url`, a webhook's target): only http(s), and only public addresses unless a setting
names the host or network (tests and local demos need loopback)."""

import functools
import ipaddress
import socket
from urllib.parse import SplitResult, urlsplit

import requests
from django.conf import settings

ALLOWED_SCHEMES = ("http", "https")


class UnsafeURLError(ValueError):
    """The URL may not be fetched; `message` says why (for a client: its own URL)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def port_of(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def _allowed_origins() -> frozenset[tuple[str, str, int]]:
    """`OUTBOUND_ALLOWED_ORIGINS` as (scheme, host, port): one service on a non-public address
    (the demo's sandbox), without the rest of its host or network."""
    return _parsed_origins(tuple(settings.OUTBOUND_ALLOWED_ORIGINS))


# Parsed once per value of the setting (every webhook POST and source URL asks), not per call.
@functools.lru_cache(maxsize=8)
def _parsed_origins(texts: tuple[str, ...]) -> frozenset[tuple[str, str, int]]:
    return frozenset(
        (parts.scheme, (parts.hostname or "").lower(), port_of(parts))
        for parts in map(urlsplit, texts)
    )


def _allowed_networks() -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return _parsed_networks(tuple(settings.OUTBOUND_ALLOWED_NETWORKS))


@functools.lru_cache(maxsize=8)
def _parsed_networks(texts: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(net, strict=False) for net in texts)


def check_public_url(url: str, *, approved_hosts: dict | None = None) -> list[str] | None:
    """Raise `UnsafeURLError` unless `url` is http(s) and every address its host resolves to is
    public, or the host, its origin or its network is allowed by settings. Returns the approved
    addresses to connect to (None for a host or origin the settings allow by name).
    `approved_hosts` remembers the hosts approved so far, for a caller checking many URLs at once
    (a bulk create's)."""
    try:
        parts = urlsplit(url)
        port = port_of(parts)
    except ValueError:
        raise UnsafeURLError("The URL is malformed.") from None
    if parts.scheme not in ALLOWED_SCHEMES:
        raise UnsafeURLError(f"Only {' and '.join(ALLOWED_SCHEMES)} URLs are accepted.")
    host = (parts.hostname or "").lower()
    if not host:
        raise UnsafeURLError("The URL has no host.")
    if parts.username or parts.password:
        raise UnsafeURLError("URLs with credentials are not accepted.")
    if host in settings.OUTBOUND_ALLOWED_HOSTS or (parts.scheme, host, port) in _allowed_origins():
        return None
    if approved_hosts is None:
        return _public_addresses(host, port)
    if (host, port) not in approved_hosts:
        approved_hosts[host, port] = _public_addresses(host, port)
    return approved_hosts[host, port]


def _resolved(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The host's addresses: an IP address written plainly is its own, without a look-up (which
    costs a create more than the rest of the check); any other form goes to the resolver
    (`127.1`, `0x7f.0.0.1` and other forms inet_aton reads included)."""
    try:
        return [_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        raise UnsafeURLError(f"The host {host} cannot be resolved.") from None
    return [_address(info[4][0]) for info in infos]


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address without its IPv6 zone (`fe80::1%eth0`), which does not change where it is."""
    return ipaddress.ip_address(text.split("%", 1)[0])


def _public_addresses(host: str, port: int) -> list[str]:
    allowed = _allowed_networks()
    approved = []
    for address in _resolved(host, port):
        approved.append(str(address))
        if any(address in network for network in allowed):
            continue
        for candidate in (address, *embedded_ipv4(address)):
            if not is_public(candidate):
                described = address_class(candidate)
                if candidate is not address:
                    described = f"{described} {candidate} inside {address}"
                raise UnsafeURLError(
                    f"The host {host} resolves to a non-public address ({described})."
                )
    return approved


NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
IPV4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")

# Written out rather than left to `is_global`: Python's own tables were wrong before 3.11.10
# (CVE-2024-4032), and the install may run an older 3.11. The rows of IANA's special-purpose
# registries that are not globally reachable (without the registry's few exceptions inside
# them), multicast, the deprecated site-local range, and the translation prefixes whose
# target is the operator's to choose: local-use NAT64 (RFC 8215) and SIIT's `::ffff:0:0:0/96`.
NON_PUBLIC_NETWORKS = tuple(
    ipaddress.ip_network(network)
    for network in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "::ffff:0:0:0/96",
        "64:ff9b:1::/48",
        "100::/64",
        "2001::/23",
        "2001:db8::/32",
        "2002::/16",
        "3fff::/20",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
    )
)


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether `address` may be connected to: global by our table and by Python's, and not
    reserved. The well-known NAT64 prefix and IPv4-mapped addresses are reserved in Python's
    eyes yet only carry an IPv4 address, which `embedded_ipv4` hands to this check too."""
    if any(address in network for network in NON_PUBLIC_NETWORKS):
        return False
    if address.is_reserved and not (address in NAT64 or address in IPV4_MAPPED):
        return False
    return address.is_global and not address.is_multicast


def embedded_ipv4(address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries and routes to: mapped, IPv4-compatible, NAT64,
    6to4, Teredo (the client). `::127.0.0.1` reaches loopback as surely as `127.0.0.1`."""
    if address.version != 6:
        return []
    found = [address.ipv4_mapped, address.sixtofour, address.teredo and address.teredo[1]]
    if address in NAT64 or address in IPV4_COMPATIBLE:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [candidate for candidate in found if candidate]


def address_class(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    for name in (
        "loopback",
        "link_local",
        "site_local",
        "private",
        "multicast",
        "reserved",
        "unspecified",
    ):
        if getattr(address, f"is_{name}", False):
            return name.replace("_", "-")
    return "not global"


class PinnedAdapter(requests.adapters.HTTPAdapter):
    """Connects to the address the guard approved, whatever the host's name resolves to by the
    time of the call (DNS rebinding); the Host header, TLS SNI and the certificate check keep the
    name."""

    def __init__(self, address: str, pool_size: int = 10) -> None:
        self.address = address
        super().__init__(max_retries=0, pool_maxsize=pool_size)

    def get_connection_with_tls_context(self, request, verify, proxies=None, cert=None):
        host_params, pool_kwargs = self.build_connection_pool_key_attributes(request, verify, cert)
        if host_params["scheme"] == "https":
            name = host_params["host"]
            pool_kwargs = {**pool_kwargs, "server_hostname": name, "assert_hostname": name}
        return self.poolmanager.connection_from_host(
            host=self.address,
            port=host_params["port"],
            scheme=host_params["scheme"],
            pool_kwargs=pool_kwargs,
        )
