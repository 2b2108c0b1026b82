"""An extractor's session applies the environment's proxy and CA settings as requests would, from
one reading when the session is made rather than one on every call."""

import pytest
import requests
from werkzeug import Response

from extraction.clients.base import ClientConfig, new_session
from extraction.clients.http_async import HttpAsyncClient
from extraction.errors import TransientExtractorError

ENVIRONMENT = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
)
BASE_URL = "https://extractor.internal:8443/api"


@pytest.fixture
def environment(monkeypatch):
    """`monkeypatch`, with none of the proxy and CA variables set yet."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def unreadable_environment(monkeypatch):
    """From now on, any reading of the proxy or CA settings fails the test."""

    def fail(*args, **kwargs):
        raise AssertionError("the environment was read on a call")

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", fail)
    monkeypatch.setattr(requests.utils, "get_environ_proxies", fail)
    monkeypatch.setattr(requests.utils, "should_bypass_proxies", fail)


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"HTTPS_PROXY": "http://proxy.example:3128"},
        {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "extractor.internal"},
        {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": ".internal"},
        {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "extractor.internal:8443"},
        {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "elsewhere.example"},
        {"HTTP_PROXY": "http://proxy.example:3128"},
        {"ALL_PROXY": "socks5://proxy.example:1080", "NO_PROXY": "*"},
        {"REQUESTS_CA_BUNDLE": "/etc/ssl/bundle.pem"},
        {"CURL_CA_BUNDLE": "/etc/ssl/curl.pem", "HTTPS_PROXY": "http://proxy.example:3128"},
    ],
)
def test_new_session_settles_the_environment_as_requests_reads_it(environment, values):
    for name, value in values.items():
        environment.setenv(name, value)
    url = f"{BASE_URL}/v1/extractions/abc"
    expected = requests.Session().merge_environment_settings(url, {}, None, None, None)
    session = new_session(BASE_URL, 4)
    unreadable_environment(environment)

    assert session.merge_environment_settings(url, {}, None, None, None) == expected
    assert session.trust_env is False


def test_new_session_reads_the_environment_for_a_url_elsewhere(environment):
    """A URL on another host (a poll location stored before the base URL changed) gets the
    proxies requests would give it, not the base URL's."""
    environment.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    environment.setenv("NO_PROXY", "extractor.internal")
    session = new_session(BASE_URL, 4)

    for url in (f"{BASE_URL}/v1", "https://other.example/v1", "http://extractor.internal/v1"):
        expected = requests.Session().merge_environment_settings(url, {}, None, None, None)
        assert session.merge_environment_settings(url, {}, None, None, None) == expected


def test_new_session_sends_through_the_environment_proxy(environment, httpserver):
    """The HTTP_PROXY of the environment receives the extractor's calls (the pytest server plays
    the proxy), with no reading of the environment on the call."""
    environment.setenv("HTTP_PROXY", httpserver.url_for("/"))
    environment.setenv("NO_PROXY", "elsewhere.example")
    seen = []
    httpserver.expect_request("/v1/extractions/abc").respond_with_handler(
        lambda request: seen.append(request.host) or Response('{"status": "running"}')
    )
    client = HttpAsyncClient(ClientConfig(base_url="http://extractor.internal"))
    unreadable_environment(environment)

    client.poll("http://extractor.internal/v1/extractions/abc")

    assert seen == ["extractor.internal"]


def test_new_session_bypasses_the_proxy_for_a_no_proxy_host(environment, httpserver):
    """NO_PROXY naming the extractor's host: the call goes straight to the host (which does not
    exist), never to the proxy."""
    environment.setenv("HTTP_PROXY", httpserver.url_for("/"))
    environment.setenv("NO_PROXY", "extractor.invalid")
    client = HttpAsyncClient(ClientConfig(base_url="http://extractor.invalid"))

    with pytest.raises(TransientExtractorError, match="connection failed"):
        client.poll("http://extractor.invalid/v1/extractions/abc")

    assert httpserver.log == []
