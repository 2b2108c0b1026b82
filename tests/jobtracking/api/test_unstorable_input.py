"""Client input that PostgreSQL or our JSON writers cannot hold (`jobtracking.infra.storable`) is
refused at the edge, by its field's path, and changes nothing; in a bulk request, one bad item
fails alone; and no text a client sends, echoed in a refusal, turns it into a 500."""

import json

import pytest
from django.db.models import Model
from rest_framework.serializers import BaseSerializer

from jobtracking.api.serializers import DRF_TEXT_CHECKS, StrictSerializer, storable_text
from jobtracking.api.webhook_serializers import WebhookEndpointInputSerializer
from jobtracking.models import Batch, ExtractionJob, JobStatusChange, WebhookSubscription
from tests.factories import BatchFactory, ExtractionJobFactory
from tests.jobtracking.api.conftest import (
    WEBHOOK_PERMISSIONS,
    assert_problem,
    client_for,
    service_account,
)

pytestmark = pytest.mark.django_db
JOBS = "/api/v1/jobs/"
BATCHES = "/api/v1/batches/"
WEBHOOKS = "/api/v1/webhook_endpoints/"
NUL = "Null characters are not allowed."
SURROGATE = "Must be valid Unicode text (no lone surrogates)."


def job(file_id: str = "f-1", **fields) -> dict:
    return {
        "extractor": "sandbox",
        "file_id": file_id,
        "source_url": f"https://files.example.org/{file_id}.pdf",
        **fields,
    }


def as_json(data: dict, **raw: str) -> str:
    """`data` as JSON text, with the values named in `raw` written as the JSON text given: a
    number as a client wrote it (1e308 is a float), a lone surrogate as its escape."""
    text = json.dumps({**data, **{name: f"<{name}>" for name in raw}})
    for name, value in raw.items():
        text = text.replace(f'"<{name}>"', value)
    return text


def jobs_json(*items: str) -> str:
    """A bulk body of items written as JSON text."""
    return '{"jobs": [' + ", ".join(items) + "]}"


def post_json(client, url: str, text: str, **headers):
    return client.generic("POST", url, text, content_type="application/json", **headers)


ROWS: tuple[type[Model], ...] = (ExtractionJob, JobStatusChange, Batch, WebhookSubscription)


def row_counts() -> list[int]:
    return [model.objects.count() for model in ROWS]


# Numbers beyond 64 bits (and not finite), in metadata and options

BEYOND_64_BITS = {
    "18446744073709551616": "Integers must fit in 64 bits.",  # 2**64
    "-9223372036854775809": "Integers must fit in 64 bits.",
    "1e308": "Numbers must be within the 64-bit integer range.",
    "1e400": "Numbers must be finite (NaN and Infinity are not JSON).",  # read as Infinity
}


@pytest.mark.parametrize("number", BEYOND_64_BITS)
@pytest.mark.parametrize("field", ["metadata", "options"])
def test_a_create_refuses_a_number_beyond_64_bits_by_its_path(api, extractor, field, number):
    text = as_json(job(), **{field: '{"a": {"b": [0, 1, ' + number + "]}}"})
    problem = assert_problem(post_json(api, JOBS, text), 400, "validation_error")
    assert problem["errors"] == {f"{field}.a.b[2]": [BEYOND_64_BITS[number]]}
    assert not ExtractionJob.objects.exists()


def test_a_multipart_create_refuses_a_number_beyond_64_bits(api, extractor):
    form = {**job(), "metadata": '{"n": 18446744073709551616}'}
    problem = assert_problem(api.post(JOBS, form), 400, "validation_error")
    assert problem["errors"] == {"metadata.n": ["Integers must fit in 64 bits."]}
    assert not ExtractionJob.objects.exists()


def test_a_batch_refuses_its_own_metadata_beyond_64_bits(api):
    problem = assert_problem(
        post_json(api, BATCHES, as_json({"jobs": []}, metadata='{"n": 1e308}')),
        400,
        "validation_error",
    )
    assert problem["errors"] == {"metadata.n": ["Numbers must be within the 64-bit integer range."]}
    assert not Batch.objects.exists()


@pytest.fixture(params=["jobs bulk", "batch create", "batch add jobs"])
def bulk_url(request, api) -> str:
    """Each endpoint that takes a list of jobs."""
    if request.param == "jobs bulk":
        return f"{JOBS}bulk/"
    if request.param == "batch create":
        return BATCHES
    batch = api.post(BATCHES, {"jobs": []}, format="json").json()["batch"]
    return f"{BATCHES}{batch['id']}/jobs/"


def item_error(index: int, errors: dict) -> dict:
    """A bulk item's refusal, as every bulk endpoint answers it."""
    return {
        "index": index,
        "status": "error",
        "job": None,
        "error": {
            "errors": errors,
            "type": "/api/problems/validation_error",
            "title": "Bad request",
            "status": 400,
            "code": "validation_error",
            "detail": "The item is invalid.",
        },
    }


@pytest.mark.parametrize("number", BEYOND_64_BITS)
def test_a_bulk_item_with_a_number_beyond_64_bits_fails_alone(api, extractor, bulk_url, number):
    bad = as_json(job("bad"), metadata='{"a": [' + number + "]}")
    text = jobs_json(json.dumps(job("good")), bad)
    response = post_json(api, bulk_url, text)
    assert response.status_code in (200, 201), response.content
    good, refused = response.json()["results"]
    assert good["status"] == "created"
    assert refused == item_error(1, {"metadata.a[0]": [BEYOND_64_BITS[number]]})
    assert list(ExtractionJob.objects.values_list("file_id", flat=True)) == ["good"]


@pytest.mark.parametrize(("escape", "why"), [("\\u0000", NUL), ("\\ud800", SURROGATE)])
def test_a_bulk_item_with_text_that_cannot_be_stored_fails_alone(
    api, extractor, bulk_url, escape, why
):
    bad = as_json(job("bad"), extractor=f'"sandbox{escape}"', file_name=f'"a{escape}.pdf"')
    response = post_json(api, bulk_url, jobs_json(json.dumps(job("good")), bad))
    assert response.status_code in (200, 201), response.content
    refused = response.json()["results"][1]
    assert refused == item_error(1, {"extractor": [why], "file_name": [why]})
    assert list(ExtractionJob.objects.values_list("file_id", flat=True)) == ["good"]


# An item that is not an object


@pytest.mark.parametrize("item", [1, "job", ["a"], None, True])
def test_a_bulk_item_that_is_not_an_object_fails_alone_under_its_index(
    api, extractor, bulk_url, item
):
    response = api.post(bulk_url, {"jobs": [job("good"), item]}, format="json")
    assert response.status_code in (200, 201), response.content
    body = response.json()
    good, refused = body["results"]
    assert (body["created"], body["failed"], good["status"]) == (1, 1, "created")
    assert refused == item_error(
        1, {"non_field_errors": ["Must be a JSON object of a job's fields."]}
    )
    assert list(ExtractionJob.objects.values_list("file_id", flat=True)) == ["good"]


# Text that cannot be stored, in any field of any input serializer


def input_serializers() -> list[type[StrictSerializer]]:
    found, unseen = [], [StrictSerializer]
    while unseen:
        serializer = unseen.pop()
        found.append(serializer)
        unseen.extend(serializer.__subclasses__())
    return found


def test_every_field_of_every_input_serializer_checks_text_by_the_one_rule():
    assert WebhookEndpointInputSerializer in input_serializers()  # (they are all imported)
    for serializer in input_serializers():
        for name, field in serializer().fields.items():
            if isinstance(field, BaseSerializer):
                continue  # a nested one: among `input_serializers()` itself
            for checked in filter(None, (field, getattr(field, "child", None))):
                assert storable_text in checked.validators, (serializer, name)
                assert not any(isinstance(c, DRF_TEXT_CHECKS) for c in checked.validators)


@pytest.fixture
def hostile(db, extractor):
    """A client with every permission these endpoints need, and something to act on."""
    user = service_account("hostile", *WEBHOOK_PERMISSIONS)
    pending = ExtractionJobFactory(requested_by=user, extractor=extractor)
    failed = ExtractionJobFactory(requested_by=user, extractor=extractor, failed=True)
    batch = BatchFactory(requested_by=user)
    urls = {
        "job": JOBS,
        "batch": BATCHES,
        "cancel": f"{JOBS}{pending.pk}/cancel/",
        "requeue": f"{JOBS}{failed.pk}/requeue/",
        "batch cancel": f"{BATCHES}{batch.pk}/cancel/",
        "webhook": WEBHOOKS,
    }
    return client_for(user), urls


# (endpoint, the other fields of its body, the text field)
TEXT_FIELDS = [
    *(("job", job(), name) for name in ("extractor", "file_id", "file_name", "content_type")),
    *(("job", job(), name) for name in ("file_sha256", "source_url", "priority")),
    ("batch", {"jobs": []}, "client_reference"),
    ("cancel", {}, "reason"),
    ("requeue", {}, "reason"),
    ("batch cancel", {}, "reason"),
    ("webhook", {"url": "https://files.example.org/hook"}, "url"),
    ("webhook", {"url": "https://files.example.org/hook"}, "description"),
]


@pytest.mark.parametrize(("escape", "why"), [("\\u0000", NUL), ("\\ud800", SURROGATE)])
@pytest.mark.parametrize(("endpoint", "others", "field"), TEXT_FIELDS)
def test_text_fields_refuse_nul_and_lone_surrogates_and_change_nothing(
    hostile, endpoint, others, field, escape, why
):
    client, urls = hostile
    before = row_counts()
    text = as_json(others, **{field: f'"ok{escape}"'})
    problem = assert_problem(post_json(client, urls[endpoint], text), 400, "validation_error")
    messages = problem["errors"][field]
    # A field whose own rule reads the value first (a priority's names) refuses it by that rule.
    assert why in messages or field == "priority", messages
    assert row_counts() == before


@pytest.mark.parametrize("url", [JOBS, BATCHES])
def test_an_idempotency_key_with_a_nul_is_refused(api, extractor, url):
    body = job() if url == JOBS else {"jobs": [job()]}
    response = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="key\x00")
    problem = assert_problem(response, 400, "validation_error")
    assert problem["errors"] == {"Idempotency-Key": [NUL]}
    assert row_counts() == [0, 0, 0, 0]


# Client text echoed in a refusal

REPLACED = "\ufffd"

HOOK = {"url": "https://files.example.org/h"}
BODY_ECHOES = [
    # (endpoint, JSON body, the error's key, the start of its message)
    (
        JOBS,
        as_json(job(), x="1").replace('"x"', '"\\ud800x"'),
        f"{REPLACED}x",
        "Unknown field.",
    ),
    (JOBS, as_json(job(), priority='"\\ud800"'), "priority", f'"{REPLACED}" is not a priority'),
    (JOBS, as_json(job(), extractor='"\\ud800"'), "extractor", SURROGATE),
    (JOBS, as_json(job(), metadata='{"\\ud800": 1}'), "metadata", f"Key '{REPLACED}'"),
    (WEBHOOKS, as_json(HOOK, x="1").replace('"x"', '"\\udfff"'), REPLACED, "Unknown field."),
    (
        WEBHOOKS,
        as_json(HOOK, event_types='["job.\\ud800"]'),
        "event_types.0",
        f'"job.{REPLACED}" is not a valid choice.',
    ),
]


@pytest.mark.parametrize(("url", "text", "key", "message"), BODY_ECHOES)
def test_a_refusal_echoing_a_lone_surrogate_writes_it_as_a_replacement(
    hostile, url, text, key, message
):
    client, _ = hostile
    before = row_counts()
    problem = assert_problem(post_json(client, url, text), 400, "validation_error")
    assert problem["errors"][key][0].startswith(message), problem["errors"]
    assert row_counts() == before


def test_a_bulk_item_with_an_unknown_field_named_by_a_lone_surrogate_fails_alone(api, extractor):
    text = jobs_json(json.dumps(job("good")), '{"\\ud800": 1}')
    response = post_json(api, f"{JOBS}bulk/", text)
    assert response.status_code == 200, response.content
    refused = response.json()["results"][1]
    assert refused["error"]["errors"][REPLACED][0].startswith("Unknown field.")
    assert list(ExtractionJob.objects.values_list("file_id", flat=True)) == ["good"]


@pytest.mark.parametrize(
    ("query", "key"),
    [
        ("%ED%A0%80=1", REPLACED * 3),  # not UTF-8: each byte read as U+FFFD
        ("x%00=1", f"x{REPLACED}"),
        ("status=%ED%A0%80", "status"),
        ("ordering=%ED%A0%80", "ordering"),
        ("file_id=%00", "file_id"),
    ],
)
def test_a_query_parameter_echoed_in_a_refusal_is_written_safely(api, query, key):
    problem = assert_problem(api.get(f"{JOBS}?{query}"), 400, "validation_error")
    assert key in problem["errors"]


def test_a_query_string_of_raw_bytes_that_are_not_utf8_is_refused_not_a_500(api):
    # What a client that does not percent-encode sends (WSGI hands it over as latin-1).
    response = api.get(JOBS, QUERY_STRING="\xed\xa0\x80=1")
    assert_problem(response, 400, "validation_error")


def test_the_browsable_api_shows_a_refused_body_with_a_lone_surrogate(client, extractor):
    client.force_login(service_account("person"))
    text = as_json(job(), file_id='"f\\ud800"', priority='"\\udfff"')
    response = post_json(client, JOBS, text, HTTP_ACCEPT="text/html")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert SURROGATE in response.content.decode()
    assert not ExtractionJob.objects.exists()
