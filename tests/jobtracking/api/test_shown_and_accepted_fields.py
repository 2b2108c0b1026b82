"""What a client sends and what it reads back agree: a field a create accepts is shown by the
read, and a field the read shows is accepted by the create, unless listed below with the reason
it is on one side only. So a field added to one side alone (a job's `grant_id` shown but never
taken) fails here until it is added to the other or listed; and a listed field that stopped
being one-sided fails too, so that the lists stay true. Each check is shown to see both ways."""

import pytest
from rest_framework import serializers

from jobtracking.api.serializers import (
    BatchCreateSerializer,
    BatchSerializer,
    ExtractionJobCreateSerializer,
    ExtractionJobSerializer,
)
from jobtracking.api.webhook_serializers import (
    WebhookEndpointInputSerializer,
    WebhookEndpointSerializer,
)

JOB = {
    "input_only": {
        "file": "an upload's bytes are not echoed: `has_upload` says there is one",
    },
    "output_only": {
        "id": "the service's id for it",
        "status": "the lifecycle's (`states.py`), moved by services, never sent",
        "requested_by": "the authenticated client",
        "batch": "given by the batch endpoints (`POST /batches/`, bulk's `batch`), not a job's",
        "has_upload": "whether a `file` was sent",
        "file_facts": "who measured the type, size and digest, or why they are not known",
        "expected_pages": "counted by the service from an upload (a PDF's pages, an image's one)",
        "attempt": "the engine's count of attempts (a requeue starts one)",
        "submit_attempts": "the engine's count",
        "poll_count": "the engine's count",
        "progress": "the extractor's report",
        "external_job_id": "the extractor's id for it",
        "external_status": "the extractor's word for its state",
        "error": "the outcome of a failed job",
        "reused_from": "the job whose result it took, with no extractor call (`reuse_result`)",
        "created_at": "a moment of its lifecycle",
        "submitted_at": "a moment of its lifecycle",
        "started_at": "a moment of its lifecycle",
        "completed_at": "a moment of its lifecycle",
        "updated_at": "a moment of its lifecycle",
        "deadline_at": "its creation plus its extractor's `max_duration`",
        "held_since": "when the budget gate held it (`services.budgets`)",
        "durations": "computed from its moments",
        "links": "the API's URLs of it",
    },
}
BATCH = {
    "input_only": {
        "close": "shown as `closed_at` and `status`",
        "jobs": "each answered in the create's `results`, counted in `total` and `by_status`, "
        "listed at `links.jobs`",
    },
    "output_only": {
        "id": "the service's id for it",
        "requested_by": "the authenticated client",
        "status": "derived from its jobs and `closed_at`, `cancelled_at`",
        "total": "counted from its jobs",
        "active": "counted from its jobs",
        "by_status": "counted from its jobs",
        "progress": "counted from its jobs",
        "failures": "counted from its jobs",
        "created_at": "a moment of its lifecycle",
        "closed_at": "a moment of its lifecycle (`close` sets it)",
        "cancelled_at": "a moment of its lifecycle",
        "completed_at": "a moment of its lifecycle",
        "first_job_created_at": "read from its jobs",
        "last_job_created_at": "read from its jobs",
        "first_job_completed_at": "read from its jobs",
        "last_job_completed_at": "read from its jobs",
        "links": "the API's URLs of it",
    },
}
WEBHOOK_ENDPOINT = {
    "input_only": {},
    "output_only": {
        "id": "the service's id for it",
        "created_at": "when it was made",
        "updated_at": "when it was last changed",
    },
}


def accepted(serializer: serializers.Serializer) -> set[str]:
    return {name for name, field in serializer.fields.items() if not field.read_only}


def shown(serializer: serializers.Serializer) -> set[str]:
    return {name for name, field in serializer.fields.items() if not field.write_only}


def unexplained(
    inputs: serializers.Serializer,
    outputs: serializers.Serializer,
    *,
    input_only: dict[str, str],
    output_only: dict[str, str],
) -> list[str]:
    """Each field on one side only that is not listed with its reason, and each listed field
    that is not (or no longer) on that side only."""
    taken, given = accepted(inputs), shown(outputs)
    return [
        *(f"{name}: accepted, never shown" for name in sorted(taken - given - input_only.keys())),
        *(f"{name}: shown, never accepted" for name in sorted(given - taken - output_only.keys())),
        *(f"{name}: listed as input only" for name in sorted(input_only.keys() - (taken - given))),
        *(f"{name}: listed as shown only" for name in sorted(output_only.keys() - (given - taken))),
    ]


@pytest.mark.parametrize(
    ("inputs", "outputs", "listed"),
    [
        (ExtractionJobCreateSerializer, ExtractionJobSerializer, JOB),
        (BatchCreateSerializer, BatchSerializer, BATCH),
        (WebhookEndpointInputSerializer, WebhookEndpointSerializer, WEBHOOK_ENDPOINT),
    ],
    ids=["job", "batch", "webhook_endpoint"],
)
def test_every_field_shown_is_accepted_and_every_field_accepted_is_shown(inputs, outputs, listed):
    assert unexplained(inputs(), outputs(), **listed) == []


class JobShowingSpecimen(ExtractionJobSerializer):
    specimen_field = serializers.CharField(source="file_id")

    class Meta(ExtractionJobSerializer.Meta):
        fields = [*ExtractionJobSerializer.Meta.fields, "specimen_field"]


class JobTakingSpecimen(ExtractionJobCreateSerializer):
    specimen_field = serializers.CharField()


def test_a_field_on_one_side_only_is_reported_whichever_side():
    created, read = ExtractionJobCreateSerializer(), ExtractionJobSerializer()
    assert unexplained(created, JobShowingSpecimen(), **JOB) == [
        "specimen_field: shown, never accepted"
    ]
    assert unexplained(JobTakingSpecimen(), read, **JOB) == [
        "specimen_field: accepted, never shown"
    ]
    # Once on both sides, it needs no reason; listed all the same, the listing is reported.
    assert unexplained(JobTakingSpecimen(), JobShowingSpecimen(), **JOB) == []
    stale = {**JOB, "output_only": {**JOB["output_only"], "specimen_field": "?"}}
    assert unexplained(JobTakingSpecimen(), JobShowingSpecimen(), **stale) == [
        "specimen_field: listed as shown only"
    ]
