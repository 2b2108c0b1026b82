"""The pages each extractor bills, counted by its own rules (`ExtractorClient.billable_pages`)."""

import pytest

from extraction.documents import job_protocol
from extraction.models import Adapter
from extraction.registry import billable_pages

WORD = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
EXCEL = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


@pytest.mark.parametrize(
    ("content_type", "result", "pages"),
    [
        ("application/pdf", {"pages": [{}, {}, {}], "content": "x" * 10_000}, 3),
        ("image/tiff", {"pages": [{}, {}]}, 2),
        (EXCEL, {"pages": [{}, {}, {}, {}]}, 4),  # a sheet per page
        (WORD, {"pages": [{}], "content": "x" * 6001}, 3),  # per 3,000 characters
        (WORD, {"pages": [{}], "content": "x" * 3000}, 1),
        ("text/html; charset=utf-8", {"pages": [{}, {}], "content": ""}, 1),
        ("", {"pages": "not a list"}, 0),
        ("application/pdf", ["not", "a", "result"], 0),
    ],
)
def test_billable_pages_follow_azures_rules(content_type, result, pages):
    assert billable_pages(Adapter.AZURE_DI, result, content_type) == pages


@pytest.mark.parametrize(
    ("result", "pages"),
    [
        ({"page_count": 5, "pages": [{}]}, 5),  # the protocol's own count first
        ({"pages": [{"text": "a"}, {"text": "b"}]}, 2),
        ({"page_count": -1, "pages": [{}]}, 1),
        ({"page_count": True}, 0),
        (None, 0),
    ],
)
def test_billable_pages_of_the_job_protocol(result, pages):
    for adapter in (Adapter.HTTP_ASYNC, Adapter.SANDBOX):
        assert billable_pages(adapter, result, "application/pdf") == pages


@pytest.mark.parametrize(
    ("answer", "billed"),
    [
        ({"status": "failed", "usage": {"pages": 4}}, 4),
        ({"status": "canceled", "usage": {"pages": 0}}, 0),
        ({"status": "failed"}, None),
        ({"status": "failed", "usage": {"pages": "4"}}, None),
        ({"status": "failed", "usage": [4]}, None),
    ],
)
def test_billed_pages_of_a_poll_answer(answer, billed):
    assert job_protocol.billed_pages(answer) == billed
