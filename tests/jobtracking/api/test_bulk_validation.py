"""The quick validation of bulk items (`jobtracking.api.bulk_validation`), against the create
serializer it is derived from: what the quick path accepts, the serializer accepts with the same
data; what it does not, the serializer judges (with its messages); a field or hook added to the
serializer is honoured without a change to the quick path."""

import json
import math
import socket

import pytest
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import URLValidator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from jobtracking.api.bulk_validation import PLAN, BulkItemValidator, plan
from jobtracking.api.serializers import ExtractionJobCreateSerializer
from jobtracking.infra.storable import MAX_DEPTH
from tests.factories import ExtractorFactory

pytestmark = pytest.mark.django_db
PUBLIC_URL = "https://93.184.216.34/a.pdf"
ALLOWED_HOST = "https://files.example.org"  # allowed by name in these tests (conftest)


@pytest.fixture
def extractors(db) -> dict:
    found = [ExtractorFactory(slug="on"), ExtractorFactory(slug="off", enabled=False)]
    return {extractor.slug: extractor for extractor in found}


ABSENT = object()
# Text that cannot be stored (`storable`): every text field meets each.
TEXT_FIELDS = ("extractor", "file_id", "file_name", "content_type", "file_sha256", "priority")
UNSTORABLE_TEXT = ["a\x00", "\x00", "\ud800", "a\udfffb", "\ud83d\ude00"]
# JSON objects that cannot be stored: numbers beyond 64 bits or not finite, such text in values
# and keys, deep nesting.
UNSTORABLE_JSON = [
    {"n": 2**64},
    {"n": 2**63},
    {"n": -(2**63) - 1},
    {"n": 1e308},
    {"n": -1e19},
    {"n": math.nan},
    {"n": math.inf},
    {"a": [1, {"b": 10**30}]},
    {"t": "a\x00"},
    {"t": ["\ud800"]},
    {"k\x00": 1},
    {"\ud800": 1},
    {"deep": json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)},
]
# Odd values per field, each next to a plain item in one test, mixed with random ones in another.
ODD = {
    "extractor": ["off", "missing", "", 5, None, ["on"], ABSENT, *UNSTORABLE_TEXT],
    "file_id": [" f-1", "f-1 ", "", " ", "x" * 255, "x" * 256, 7, None, ABSENT, *UNSTORABLE_TEXT],
    "file_name": ["budget.pdf", "", " ", "n" * 255, "n" * 256, None, *UNSTORABLE_TEXT],
    "content_type": ["application/pdf", "", "t" * 101, 3, *UNSTORABLE_TEXT],
    "file_size": [None, True, "12", 1.5, -1, 0, 2**63 - 1, 2**63, 10**30, 1e308, math.nan],
    "file_sha256": ["a" * 64, "A" * 64, "g" * 64, "", " " + "a" * 64, "a" * 63, *UNSTORABLE_TEXT],
    "source_url": [
        *(PUBLIC_URL + text for text in UNSTORABLE_TEXT),
        "http://10.0.0.1/x.pdf",
        "ftp://93.184.216.34/a.pdf",
        "https://user:pw@93.184.216.34/a.pdf",
        "https://93.184.216.34/" + "a" * 1900,
        "https://93.184.216.34/" + "a" * 2000,
        " " + PUBLIC_URL,
        "not a url",
        "",
        None,
        ABSENT,
    ],
    "options": [{}, {"a": [1, {"b": None}]}, "{}", '{"a": 1}', "[", [], None, 3, *UNSTORABLE_JSON],
    "metadata": [{"f": 1.5}, "{}", '{"n": 18446744073709551616}', None, *UNSTORABLE_JSON],
    "priority": ["interactive", "normal", "bulk", "urgent", "", None, 1, *UNSTORABLE_TEXT],
    "csrfmiddlewaretoken": ["t"],
    "unknown": [1],
    "\ud800": [1],
}


def any_text(max_size: int) -> st.SearchStrategy[str]:
    """Any text, with NUL and surrogates (which `st.text` leaves out) often."""
    return st.text(
        st.characters(exclude_categories=()) | st.sampled_from("\x00\ud800\udfff"),
        max_size=max_size,
    )


# Integers and floats of every size, NaN and Infinity among them.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text(8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(any_text(5), children, max_size=3)
    ),
    max_leaves=8,
)
RANDOM = {
    **dict.fromkeys(("file_id", "file_name", "content_type", "file_sha256"), any_text(300)),
    # Any text, and paths on a host the settings allow (the URL check then judges the URL alone).
    "source_url": any_text(300) | any_text(40).map(ALLOWED_HOST.__add__),
    "file_size": st.integers(min_value=-2, max_value=2**64),
    "options": JSON_VALUES,
    "metadata": JSON_VALUES,
}
FIELDS = {
    name: st.sampled_from(values) | RANDOM[name] if name in RANDOM else st.sampled_from(values)
    for name, values in ODD.items()
}
PLAIN = {"extractor": "on", "file_id": "f-1", "source_url": PUBLIC_URL}


def with_swaps(swaps: dict) -> dict:
    item = {**PLAIN, **swaps}
    return {name: value for name, value in item.items() if value is not ABSENT}


ITEMS = (
    st.lists(st.sampled_from(sorted(FIELDS)), max_size=3, unique=True)
    .flatmap(lambda names: st.fixed_dictionaries({name: FIELDS[name] for name in names}))
    .map(with_swaps)
)


def judged(serializer, item) -> tuple:
    try:
        return "valid", serializer.run_validation(item)
    except ValidationError as error:
        return "refused", error.detail


def assert_agrees(extractors: dict, item) -> None:
    serializer = ExtractionJobCreateSerializer(context={"extractors": extractors})
    validator = BulkItemValidator(extractors)
    quick = validator.quick(item)
    if quick is not None:
        assert judged(serializer, item) == ("valid", quick)
    assert judged(validator.serializer, item) == judged(serializer, item)


@pytest.mark.parametrize(
    ("name", "value"), [(name, value) for name, values in ODD.items() for value in values]
)
def test_the_quick_path_agrees_with_the_serializer_on_each_odd_value(extractors, name, value):
    assert_agrees(extractors, with_swaps({name: value}))


UNSTORABLE = [(name, text) for name in TEXT_FIELDS for text in UNSTORABLE_TEXT] + [
    (name, value) for name in ("options", "metadata") for value in UNSTORABLE_JSON
]


@pytest.mark.parametrize(("name", "value"), UNSTORABLE)
def test_neither_path_accepts_what_cannot_be_stored(extractors, name, value):
    item = with_swaps({name: value})
    assert BulkItemValidator(extractors).quick(item) is None
    assert judged(ExtractionJobCreateSerializer(context={"extractors": extractors}), item)[0] == (
        "refused"
    )


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(item=ITEMS)
def test_the_quick_path_accepts_only_what_the_serializer_accepts_with_the_same_data(
    extractors, item
):
    assert_agrees(extractors, item)


@pytest.mark.parametrize(
    "item",
    [
        {"extractor": "on", "file_id": "f-1", "source_url": PUBLIC_URL},
        {
            "extractor": "on",
            "file_id": "f-2",
            "file_name": "budget.pdf",
            "content_type": "application/pdf",
            "file_size": 2048,
            "file_sha256": "a" * 64,
            "source_url": PUBLIC_URL,
            "options": {"locale": "en"},
            "metadata": {"grant": 42},
            "priority": "interactive",
        },
    ],
)
def test_plain_items_take_the_quick_path(extractors, item):
    serializer = ExtractionJobCreateSerializer(context={"extractors": extractors})
    expected = serializer.run_validation(item)
    assert BulkItemValidator(extractors).quick(item) == expected


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"extractor": "off", "file_id": "f", "source_url": PUBLIC_URL}, "extractor"),
        ({"extractor": "on", "file_id": " ", "source_url": PUBLIC_URL}, "file_id"),
        ({"extractor": "on", "file_id": "f", "source_url": "http://10.0.0.1/x"}, "source_url"),
        ({"extractor": "on", "file_id": "f", "source_url": PUBLIC_URL, "x": 1}, "x"),
        ({"extractor": "on", "file_id": "f\ud800", "source_url": PUBLIC_URL}, "file_id"),
        (with_swaps({"metadata": {"a": {"b": [0, 1, 2**64]}}}), "metadata"),
    ],
)
def test_other_items_get_the_serializers_messages(extractors, item, field):
    with pytest.raises(ValidationError) as refused:
        BulkItemValidator(extractors).validated(item)
    assert field in refused.value.detail


ONE_HOSTS_URLS = [
    f"{ALLOWED_HOST}/a.pdf",
    f"{ALLOWED_HOST}/a b.pdf",
    f"{ALLOWED_HOST}/a\u2003b.pdf",
    f"{ALLOWED_HOST}/a\tb.pdf",
    f"{ALLOWED_HOST}/é.pdf",
    f"{ALLOWED_HOST}/a%20b?q=1#frag",
    f"{ALLOWED_HOST}/" + "a" * 1990,
    f"{ALLOWED_HOST}/" + "a" * 2100,
    f"{ALLOWED_HOST}?q=1",
    f"{ALLOWED_HOST}:99999/a.pdf",
    f"{ALLOWED_HOST}:8443/a.pdf",
    "HTTPS://files.example.org/a.pdf",
    "https://files.example.org./a.pdf",
    "https://user@files.example.org/a.pdf",
    "https://[files.example.org/a.pdf",
]


def test_urls_on_one_host_are_judged_one_by_one_as_the_serializer_judges_them(extractors):
    serializer = ExtractionJobCreateSerializer(context={"extractors": extractors})
    validator = BulkItemValidator(extractors)
    accepted = 0
    for url in ONE_HOSTS_URLS * 2:  # the second time, each host has been judged before
        item = with_swaps({"source_url": url})
        quick = validator.quick(item)
        if quick is not None:
            accepted += 1
            assert judged(serializer, item) == ("valid", quick)
        assert judged(validator.serializer, item) == judged(serializer, item)
    assert accepted >= 6


def test_a_url_too_long_for_the_validator_is_refused_on_a_host_judged_before(extractors):
    # (The field's own max_length refuses it first; the shortcut must not rely on that.)
    validator, check = BulkItemValidator(extractors), URLValidator()
    validator._url(check, f"{ALLOWED_HOST}/a.pdf")
    with pytest.raises(DjangoValidationError):
        validator._url(check, f"{ALLOWED_HOST}/" + "a" * check.max_length)


@pytest.fixture
def resolver(monkeypatch) -> list:
    """Host names looked up, in order; public.example is public, private.example is not."""
    asked = []
    addresses = {"public.example": "93.184.216.34", "private.example": "10.0.0.1"}

    def getaddrinfo(host, port, *args, **kwargs):
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (addresses[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def test_each_host_is_resolved_once_a_batch_and_a_refused_one_every_time(extractors, resolver):
    validator = BulkItemValidator(extractors)
    for n in range(3):
        validator.validated(
            {"extractor": "on", "file_id": f"f{n}", "source_url": "https://public.example/a"}
        )
    for _ in range(2):
        with pytest.raises(ValidationError):
            validator.validated(
                {"extractor": "on", "file_id": "f", "source_url": "http://private.example/"}
            )
    assert resolver.count("public.example") == 1
    assert resolver.count("private.example") >= 2


def test_the_plan_reads_every_writable_field_of_the_serializer():
    writable = {
        name
        for name, field in ExtractionJobCreateSerializer().fields.items()
        if not field.read_only
    }
    assert PLAN.keys() == writable
    # Fields that only add validators to text or integers are read quickly, the rest by their own
    # rules (a field overriding how it reads its input among them).
    assert PLAN["source_url"] == PLAN["file_sha256"] == "text" and PLAN["file_size"] == "integer"
    assert PLAN["metadata"] == PLAN["extractor"] == PLAN["file"] == "field"


def test_a_field_with_its_own_reading_is_read_by_its_own_rules():
    class Shouting(serializers.CharField):
        def to_internal_value(self, data):
            return super().to_internal_value(data).upper()

    class WithShouting(ExtractionJobCreateSerializer):
        file_name = Shouting(required=False)

    assert plan(WithShouting)["file_name"] == "field"


def test_a_hook_added_to_the_serializer_is_honoured_by_the_quick_path(extractors, monkeypatch):
    def validate_file_id(self, value):
        if ".." in value:
            raise serializers.ValidationError("No parent segments.")
        return value.lower()

    monkeypatch.setattr(
        ExtractionJobCreateSerializer, "validate_file_id", validate_file_id, raising=False
    )
    validator = BulkItemValidator(extractors)
    assert validator.quick(with_swaps({"file_id": "a/../b"})) is None
    with pytest.raises(ValidationError) as refused:
        validator.validated(with_swaps({"file_id": "a/../b"}))
    assert refused.value.detail["file_id"] == ["No parent segments."]
    assert validator.quick(with_swaps({"file_id": "ABC"}))["file_id"] == "abc"


def test_the_serializers_validate_is_honoured_by_the_quick_path(extractors, monkeypatch):
    original = ExtractionJobCreateSerializer.validate

    def validate(self, data):
        data = original(self, data)
        if data["file_id"] == data.get("file_name"):
            raise serializers.ValidationError({"file_name": "Must differ from file_id."})
        return data

    monkeypatch.setattr(ExtractionJobCreateSerializer, "validate", validate)
    item = with_swaps({"file_name": "f-1"})
    with pytest.raises(ValidationError) as refused:
        BulkItemValidator(extractors).validated(item)
    assert "file_name" in refused.value.detail
