"""A guard against server-side request forgery for URLs that clients give us (a job's
`source_url`, a webhook's target): only http(s), and only public addresses unless a setting
names the host or network (tests and local demos need loopback)."""

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

from jobtracking.errors import ApplicationError

ALLOWED_SCHEMES = ("http", "https")


class UnsafeURLError(ApplicationError):
    code = "unsafe_url"
    http_status = 400


def _allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(net, strict=False) for net in settings.OUTBOUND_ALLOWED_NETWORKS]


def check_public_url(url: str) -> None:
    """Raise `UnsafeURLError` unless `url` is http(s) and every address its host resolves to is
    public, or the host or its network is allowed by settings."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UnsafeURLError("The URL is malformed.") from None
    if parts.scheme not in ALLOWED_SCHEMES:
        raise UnsafeURLError(f"Only {' and '.join(ALLOWED_SCHEMES)} URLs are accepted.")
    host = (parts.hostname or "").lower()
    if not host:
        raise UnsafeURLError("The URL has no host.")
    if parts.username or parts.password:
        raise UnsafeURLError("URLs with credentials are not accepted.")
    if host in settings.OUTBOUND_ALLOWED_HOSTS:
        return
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        raise UnsafeURLError(f"The host {host} cannot be resolved.") from None
    allowed = _allowed_networks()
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        if any(address in network for network in allowed):
            continue
        if not address.is_global or address.is_multicast:
            raise UnsafeURLError(
                f"The host {host} resolves to a non-public address ({address_class(address)})."
            )


def address_class(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    for name in ("loopback", "link_local", "private", "multicast", "reserved", "unspecified"):
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    return "not global"
