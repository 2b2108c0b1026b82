"""A host name that resolves as a test says, for the SSRF guard's tests: DNS rebinding (a
public address to the guard, loopback to the connection) or a name for loopback."""

import socket


def resolve_as(monkeypatch, name: str, *answers: str) -> None:
    """`name` resolves to each of `answers` in turn, then to the last one; other names as
    before."""
    real = socket.getaddrinfo
    remaining = list(answers)

    def getaddrinfo(host, port, *args, **kwargs):
        if host != name:
            return real(host, port, *args, **kwargs)
        address = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
