"""A client-supplied field of a job lives in six places: the model (and its migration), the
service's input `NewJob`, the create serializer, the representation and the admin's job page.
These tests fail when one of them disagrees with the others (what the API accepts and what it
shows: `tests/jobtracking/api/test_shown_and_accepted_fields.py`)."""

import dataclasses

import pytest
from django.contrib.admin.utils import flatten_fieldsets

from jobtracking.admin.jobs import ExtractionJobAdmin
from jobtracking.api.serializers import ExtractionJobCreateSerializer, ExtractionJobSerializer
from jobtracking.models import ExtractionJob
from jobtracking.services import NewJob
from tests.factories import ExtractionJobFactory

# Model fields a client never sees, and why.
INTERNAL = {
    "idempotency_key": "the client's own header, echoed by the replay itself",
    "request_fingerprint": "a digest to tell a replay from a reused key",
    "poll_error_count": "the engine's retry budget",
    "external_url": "where the extractor keeps the job: staff only",
    "external_request_id": "the extractor's request id: staff only",
    "remote_expires_at": "when the extractor forgets the job",
    "due_at": "the dispatcher's schedule",
    "claimed_at": "the dispatcher's claim",
    "lease_expires_at": "a worker's lease",
    "requeued_at": "the current attempt's start: `durations` count from it, the history shows it",
    "traceparent": "the trace its spans join: for the tracing backend, and in the logs",
    "audit_head": "the hash of the job's last audit row (docs/audit.md): verify_audit's",
    "extract_afresh": "the reuse step's: its history shows the success requeued",
}
# Model fields the representation shows under another name.
SHOWN_AS = {
    "upload": "has_upload",
    "error_code": "error",
    "error_message": "error",
    "file_facts_origin": "file_facts",
    "reused_from_job": "reused_from",
    "reused_from_attempt": "reused_from",
}
# Fields of `NewJob` that come from the request's headers, not its body.
FROM_HEADERS = {"idempotency_key", "request_fingerprint"}


def new_job_fields() -> set[str]:
    return {field.name for field in dataclasses.fields(NewJob)}


def model_fields() -> set[str]:
    return {field.name for field in ExtractionJob._meta.concrete_fields}


def test_every_field_the_create_serializer_accepts_is_an_input_field():
    serializer = ExtractionJobCreateSerializer()
    accepted = {
        field.source_attrs[0] for field in serializer.fields.values() if not field.read_only
    }
    assert accepted == new_job_fields() - FROM_HEADERS


def test_every_input_field_is_a_model_field():
    assert new_job_fields() <= model_fields()


@pytest.mark.django_db
def test_every_model_field_is_shown_or_listed_as_internal():
    shown = ExtractionJobSerializer(ExtractionJobFactory()).data.keys()
    missing = {
        name for name in model_fields() - INTERNAL.keys() if SHOWN_AS.get(name, name) not in shown
    }
    assert not missing, f"shown nowhere and not listed as internal: {sorted(missing)}"
    assert not INTERNAL.keys() & shown, "listed as internal but shown"


# Fields of the representation the job page shows under another name, and those it does not
# show in its fieldsets, and why.
ON_THE_PAGE_AS = {"has_upload": "upload_link", "error": "error_code"}
NOT_ON_THE_PAGE = {
    "batch": "the page's summary links its batch (`job_page.summary`)",
    "durations": "computed from the times shown; the summary says the turnaround",
    "links": "the API's URLs: the page has its own buttons and links",
}


def job_page_fields() -> set[str]:
    return set(flatten_fieldsets(ExtractionJobAdmin.fieldsets))


def representation_fields() -> set[str]:
    return set(ExtractionJobSerializer().fields)


def not_on_the_page(shown: set[str], page: set[str]) -> set[str]:
    """Fields of the representation the job page neither shows nor lists with a reason."""
    return {
        name
        for name in shown - NOT_ON_THE_PAGE.keys()
        if ON_THE_PAGE_AS.get(name, name) not in page
    }


def test_every_field_a_client_reads_is_on_the_admins_job_page_or_listed():
    assert not_on_the_page(representation_fields(), job_page_fields()) == set()
    assert NOT_ON_THE_PAGE.keys() <= representation_fields(), "listed but no longer shown"
    assert set(ON_THE_PAGE_AS.values()) <= job_page_fields()


def test_a_field_missing_from_the_job_page_is_reported():
    shown, page = representation_fields(), job_page_fields()
    assert not_on_the_page(shown | {"specimen_field"}, page) == {"specimen_field"}
    assert not_on_the_page(shown, page - {"file_sha256"}) == {"file_sha256"}
    assert not_on_the_page(shown | {"specimen_field"}, page | {"specimen_field"}) == set()
