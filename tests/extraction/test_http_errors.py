"""Every way an HTTP answer can go wrong ends in a clear transient or permanent error."""

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from werkzeug import Response

from extraction.clients.base import ClientConfig, SubmitRequest, parse_retry_after
from extraction.clients.http_async import HttpAsyncClient
from extraction.errors import (
    ErrorCode,
    ExternalJobLostError,
    PermanentExtractorError,
    TransientExtractorError,
)
from tests.processes import free_port

SECRET = "sk-live-do-not-leak-42"


def make(adapter, base_url, **config):
    return adapter(
        ClientConfig(base_url=base_url, model_id="prebuilt-layout", api_key=SECRET, **config)
    )


def poll_url(httpserver) -> str:
    return httpserver.url_for("/v1/extractions/abc")


def answer(httpserver, response: Response) -> None:
    httpserver.expect_request("/v1/extractions/abc").respond_with_response(response)


def test_html_error_page_is_transient(adapter, httpserver):
    answer(
        httpserver, Response("<html><h1>502 Bad Gateway</h1></html>", 502, content_type="text/html")
    )
    with pytest.raises(TransientExtractorError) as caught:
        make(adapter, httpserver.url_for("/")).poll(poll_url(httpserver))
    assert caught.value.http_status == 502
    assert "502 Bad Gateway" in str(caught.value)


def test_html_page_with_200_is_transient(adapter, httpserver):
    answer(httpserver, Response("<html>maintenance</html>", 200, content_type="text/html"))
    with pytest.raises(TransientExtractorError, match="not JSON"):
        make(adapter, httpserver.url_for("/")).poll(poll_url(httpserver))


def test_malformed_json_is_transient(adapter, httpserver):
    answer(httpserver, Response('{"status": "runn', 200, content_type="application/json"))
    with pytest.raises(TransientExtractorError, match="not JSON"):
        make(adapter, httpserver.url_for("/")).poll(poll_url(httpserver))


def test_json_that_is_not_an_object_is_transient(adapter, httpserver):
    answer(httpserver, Response("[1, 2]", 200, content_type="application/json"))
    with pytest.raises(TransientExtractorError, match="JSON object"):
        make(adapter, httpserver.url_for("/")).poll(poll_url(httpserver))


def test_oversized_response_with_content_length_is_refused(adapter, httpserver):
    answer(httpserver, Response("x" * 5000, 200, content_type="application/json"))
    with pytest.raises(PermanentExtractorError) as caught:
        make(adapter, httpserver.url_for("/"), max_response_bytes=1000).poll(poll_url(httpserver))
    assert caught.value.code == ErrorCode.INVALID_RESPONSE


def test_oversized_chunked_response_is_refused(adapter, httpserver):
    chunks = (b"x" * 1000 for _ in range(10))
    answer(
        httpserver, Response(chunks, 200, content_type="application/json", direct_passthrough=True)
    )
    with pytest.raises(PermanentExtractorError, match="exceeds") as caught:
        make(adapter, httpserver.url_for("/"), max_response_bytes=4000).poll(poll_url(httpserver))
    assert caught.value.code == ErrorCode.INVALID_RESPONSE


def test_read_timeout_is_transient(adapter, httpserver):
    def slow(request):
        time.sleep(1.0)
        return Response("{}", 200)

    httpserver.expect_request("/v1/extractions/abc").respond_with_handler(slow)
    with pytest.raises(TransientExtractorError, match="timed out"):
        make(adapter, httpserver.url_for("/"), read_timeout=0.2).poll(poll_url(httpserver))


def test_connection_refused_is_transient(adapter):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TransientExtractorError, match="connection failed"):
        make(adapter, url).poll(url + "/v1/extractions/abc")


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, ErrorCode.EXTRACTOR_AUTH),
        (403, ErrorCode.EXTRACTOR_AUTH),
        (400, ErrorCode.REJECTED_BY_EXTRACTOR),
        (415, ErrorCode.REJECTED_BY_EXTRACTOR),
        (422, ErrorCode.REJECTED_BY_EXTRACTOR),
    ],
)
def test_client_errors_are_permanent(adapter, httpserver, status, code):
    answer(
        httpserver,
        Response(
            '{"error": {"code": "X", "message": "no"}}', status, content_type="application/json"
        ),
    )
    with pytest.raises(PermanentExtractorError) as caught:
        make(adapter, httpserver.url_for("/")).poll(poll_url(httpserver))
    assert (caught.value.code, caught.value.http_status, caught.value.remote_code) == (
        code,
        status,
        "X",
    )


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_retryable_statuses_are_transient(adapter, httpserver, status):
    answer(httpserver, Response("", status, headers={"Retry-After": "4"}))
    with pytest.raises(TransientExtractorError) as caught:
        make(adapter, httpserver.url_for("/")).poll(poll_url(httpserver))
    assert (caught.value.http_status, caught.value.retry_after) == (status, 4)


def test_not_found_on_poll_is_a_lost_job(adapter, httpserver):
    answer(httpserver, Response("", 404))
    with pytest.raises(ExternalJobLostError):
        make(adapter, httpserver.url_for("/")).poll(poll_url(httpserver))


def test_retry_after_as_http_date_is_honoured(adapter, httpserver):
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    answer(httpserver, Response("", 503, headers={"Retry-After": later}))
    with pytest.raises(TransientExtractorError) as caught:
        make(adapter, httpserver.url_for("/")).poll(poll_url(httpserver))
    assert 27 <= caught.value.retry_after <= 30


def test_redirects_are_not_followed(adapter, httpserver):
    answer(httpserver, Response("", 302, headers={"Location": "http://169.254.169.254/"}))
    with pytest.raises(PermanentExtractorError) as caught:
        make(adapter, httpserver.url_for("/")).poll(poll_url(httpserver))
    assert caught.value.http_status == 302


def test_errors_never_contain_the_key_or_the_query_string(adapter, httpserver):
    answer(httpserver, Response("", 500))
    url = poll_url(httpserver) + "?sig=token-in-query"
    with pytest.raises(TransientExtractorError) as caught:
        make(adapter, httpserver.url_for("/")).poll(url)
    assert SECRET not in str(caught.value)
    assert "token-in-query" not in str(caught.value)


def test_submit_to_http_async_sends_multipart_key_and_idempotency_key(httpserver):
    httpserver.expect_oneshot_request(
        "/v1/extractions",
        method="POST",
        headers={"Authorization": f"Bearer {SECRET}", "Idempotency-Key": "job:1"},
    ).respond_with_json({"id": "e-1", "status": "queued"}, status=202, headers={"Retry-After": "1"})
    submission = make(HttpAsyncClient, httpserver.url_for("/")).submit(
        SubmitRequest(file_name="a.txt", content=b"hi", idempotency_key="job:1")
    )
    assert (submission.external_id, submission.retry_after) == ("e-1", 1)
    assert submission.poll_url == httpserver.url_for("/v1/extractions/e-1")
    request, _ = httpserver.log[0]
    assert request.files["file"].read() == b"hi"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "5"}, 5.0),
        ({"Retry-After": "0.5"}, 0.5),
        ({"Retry-After": "-3"}, 0.0),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({"retry-after-ms": "1500"}, 1.5),
        ({}, None),
        ({"Retry-After": "99999999"}, 86400.0),
    ],
)
def test_parse_retry_after(headers, expected):
    assert parse_retry_after(headers) == expected


def test_credentials_in_a_netrc_never_reach_the_extractor(httpserver, tmp_path, monkeypatch):
    """requests would put the ~/.netrc entry for the host in place of the key our headers carry,
    on every request that has no auth of its own."""
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine localhost login someone password their-other-secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    seen = []
    httpserver.expect_request("/v1/extractions/abc").respond_with_handler(
        lambda request: seen.append(request.headers.get("Authorization")) or Response("{}")
    )

    make(HttpAsyncClient, httpserver.url_for("/")).poll(poll_url(httpserver))

    assert seen == [f"Bearer {SECRET}"]
