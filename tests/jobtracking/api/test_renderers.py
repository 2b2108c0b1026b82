"""The API's JSON renderer writes what DRF's writes, faster."""

import datetime
import decimal
import json
import uuid

import pytest
from django.utils.translation import gettext_lazy
from rest_framework.renderers import JSONRenderer

from jobtracking.api.renderers import FastJSONRenderer

MOMENT = datetime.datetime(2026, 12, 3, 17, 0, 1, 250000, tzinfo=datetime.UTC)
CASES = {
    "job-like": {
        "id": uuid.UUID("01a23cf4-20e1-7ad8-aeed-4e36ed495bac"),
        "file_name": "Förderantrag 2026 — 株式会社.pdf",
        "file_size": 2**63 - 1,
        "metadata": {"nested": [1, 2.5, None, True, {"a": ""}]},
        "links": {"self": "https://api.example.org/api/v1/jobs/1/"},
    },
    "times and lazy text": {
        "at": MOMENT,
        "day": MOMENT.date(),
        "took": datetime.timedelta(seconds=90),
        "detail": gettext_lazy("Not found."),
        "amount": decimal.Decimal("12.50"),
    },
    "line separators": {"text": "one\u2028two\u2029three"},
    "beyond 64 bits": {"n": 10**30},
    "integer keys": {1: "a", 2: "b"},
    "list": [MOMENT, "x"],
}


@pytest.mark.parametrize("data", CASES.values(), ids=CASES.keys())
def test_the_text_is_drfs(data):
    assert FastJSONRenderer().render(data) == JSONRenderer().render(data)


def test_indented_output_when_asked_for_it():
    text = FastJSONRenderer().render({"a": [1]}, "application/json; indent=2", {})
    assert text == JSONRenderer().render({"a": [1]}, "application/json; indent=2", {})
    assert json.loads(text) == {"a": [1]} and b"\n  " in text
