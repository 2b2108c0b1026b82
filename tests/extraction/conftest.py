import ssl

import pytest
import trustme
from pytest_httpserver import HTTPServer

from extraction.registry import ADAPTERS

# Each client class once, named by the first adapter that builds it (several may share one: the
# bundled sandbox speaks the generic protocol). From the registry, so that a new adapter's
# client is held to the same contract without being listed here.
CLIENTS = {}
for name, client in ADAPTERS.items():
    CLIENTS.setdefault(client, str(name))


@pytest.fixture(params=list(CLIENTS), ids=list(CLIENTS.values()))
def adapter(request):
    """Each adapter's client class in turn."""
    return request.param


@pytest.fixture
def tls_server(monkeypatch, tmp_path):
    """Starts a TLS server on loopback whose certificate comes from `serving` (an authority),
    with the environment's REQUESTS_CA_BUNDLE naming `trusted` (which the clients honour, as
    requests would): `tls_server(serving, trusted)`."""
    started = []

    def start(serving: trustme.CA, trusted: trustme.CA) -> HTTPServer:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.issue_cert("127.0.0.1").configure_cert(context)
        bundle = tmp_path / f"authority-{len(started)}.pem"
        trusted.cert_pem.write_to_path(str(bundle))
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
        server = HTTPServer(host="127.0.0.1", port=0, ssl_context=context)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.clear()
        if server.is_running():
            server.stop()
