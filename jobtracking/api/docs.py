"""What the OpenAPI document says about each operation: a summary, a description and realistic
examples. Kept apart from the views so that they read as code."""

from datetime import UTC, datetime, timedelta
from uuid import UUID

from django.contrib.auth import get_user_model
from drf_spectacular.utils import (
    OpenApiExample,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers

from extraction.models import Adapter, Extractor
from jobtracking.models import ExtractionJob, FileFactsOrigin, Priority
from jobtracking.representation import job_representation, moment

JOB_ID = "01939f4c-7a2e-7d4b-9a61-3f2b8c9d0e1f"
JOBS_URL = "https://jobs.fluxx.example/api/v1/jobs/"
EVENTS_URL = "https://jobs.fluxx.example/api/v1/events/"


CREATED = datetime(2026, 12, 3, 9, 15, 2, 118000, tzinfo=UTC)
STARTED = CREATED + timedelta(seconds=1.884)


def example_job(**fields) -> ExtractionJob:
    """A job being processed (`fields` change it), built in memory and never saved, so that
    the examples are written by the representation clients get."""
    return ExtractionJob(
        **{
            "id": UUID(JOB_ID),
            "extractor": Extractor(pk=1, slug="azure-layout", adapter=Adapter.AZURE_DI),
            "status_id": "processing",
            "priority": Priority.NORMAL,
            "file_id": "grant-4711/budget.pdf",
            "file_name": "budget.pdf",
            "content_type": "application/pdf",
            "file_size": 184320,
            "file_sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "file_facts_origin": FileFactsOrigin.SERVICE,
            "source_url": "https://files.fluxx.example/grants/4711/budget.pdf",
            "options": {"pages": "1-3"},
            "metadata": {"grant_id": 4711},
            "requested_by": get_user_model()(pk=1, username="fluxx-platform"),
            "attempt": 1,
            "submit_attempts": 1,
            "poll_count": 3,
            "progress": 40,
            "external_job_id": "3b1c2d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d",
            "external_status": "running",
            "created_at": CREATED,
            "submitted_at": CREATED + timedelta(seconds=0.753),
            "started_at": STARTED,
            "updated_at": CREATED + timedelta(seconds=7.337),
            "deadline_at": CREATED + timedelta(hours=1),
            **fields,
        }
    )


JOB_EXAMPLE = job_representation(example_job(), jobs_url=JOBS_URL)
# An event's links are the API's paths; spelled out, as reverse() cannot run while the
# URLconf loads (a test pins it to the real path).
EVENT_JOBS_PATH = "/api/v1/jobs/"
EVENT_EXAMPLE = {
    "id": 48213,
    "event_id": "01939f4c-8b10-7c2a-b3d4-5e6f7a8b9c0d",
    "type": "job.processing",
    "job": JOB_ID,
    "batch": None,
    "created_at": moment(STARTED),
    # The job as it was when it started.
    "payload": job_representation(
        example_job(poll_count=1, progress=10, updated_at=STARTED), jobs_url=EVENT_JOBS_PATH
    ),
}

CREATE_BY_URL = OpenApiExample(
    "Create by URL",
    summary="The extractor's file, fetched from a URL",
    description="The service checks the URL (public address, http(s)) and hands it over.",
    value={
        "extractor": "azure-layout",
        "file_id": "grant-4711/budget.pdf",
        "file_name": "budget.pdf",
        "source_url": "https://files.fluxx.example/grants/4711/budget.pdf",
        "options": {"pages": "1-3"},
        "metadata": {"grant_id": 4711},
        "priority": "interactive",
    },
    request_only=True,
    media_type="application/json",
)
CREATE_BY_UPLOAD = OpenApiExample(
    "Create by upload",
    summary="The file itself, as multipart/form-data",
    description='curl -H "Authorization: Token $KEY" -F extractor=sandbox -F file_id=budget '
    "-F file=@budget.csv -F 'metadata={\"grant_id\": 4711}' https://…/api/v1/jobs/",
    value={
        "extractor": "sandbox",
        "file_id": "grant-4711/budget.csv",
        "file": "(binary: budget.csv)",
        "metadata": '{"grant_id": 4711}',
    },
    request_only=True,
    media_type="multipart/form-data",
)
JOB_RESPONSE = OpenApiExample(
    "A job", value=JOB_EXAMPLE, response_only=True, status_codes=["200", "201"]
)
BULK_REQUEST = OpenApiExample(
    "Two jobs",
    value={
        "jobs": [
            {
                "extractor": "azure-layout",
                "file_id": "grant-4711/budget.pdf",
                "source_url": "https://files.fluxx.example/grants/4711/budget.pdf",
            },
            {"extractor": "nope", "file_id": "grant-4711/report.pdf"},
        ]
    },
    request_only=True,
)
BULK_RESPONSE = OpenApiExample(
    "One created, one refused",
    value={
        "created": 1,
        "failed": 1,
        "results": [
            {"index": 0, "status": "created", "job": JOB_EXAMPLE, "error": None},
            {
                "index": 1,
                "status": "error",
                "job": None,
                "error": {
                    "type": "/api/problems/validation_error",
                    "title": "Bad request",
                    "status": 400,
                    "code": "validation_error",
                    "detail": "The item is invalid.",
                    "errors": {
                        "extractor": [
                            "No extractor 'nope'. Available: azure-layout, sandbox "
                            "(see GET /api/v1/extractors/)."
                        ],
                        "source_url": ["Give exactly one of source_url and file."],
                    },
                },
            },
        ],
    },
    response_only=True,
    status_codes=["200"],
)

jobs_docs = extend_schema_view(
    list=extend_schema(
        summary="List jobs",
        description="The jobs this client may see, newest first, a cursor page at a time "
        "(`next` and `previous` are opaque links). Filter by status (repeatable), extractor, "
        "priority, file id, external id, error code, requester and created/completed ranges; "
        "`search` matches a job id, file id or external id exactly, or a file-name prefix.",
    ),
    retrieve=extend_schema(
        summary="Get a job",
        description="One job: where it is in its lifecycle, its error if it failed, its "
        "durations and links to its history and result.",
        examples=[JOB_RESPONSE],
    ),
    create=extend_schema(
        summary="Create a job",
        description="Ask an extractor to extract one file, given by `source_url` (JSON or "
        "form) or uploaded as `file` (multipart). Answers 201 with the job and a `Location` "
        "header. With an `Idempotency-Key`, a replay of the same request answers 200 with the "
        "original job and `Idempotent-Replayed: true`; the same key with a different request "
        "is a 422. A second active job for the same extractor and file_id is a 409 naming the "
        "active one (`job_id`).",
        examples=[CREATE_BY_URL, CREATE_BY_UPLOAD, JOB_RESPONSE],
    ),
    bulk=extend_schema(
        summary="Create up to 500 jobs",
        description="Jobs from URLs (no uploads), in one transaction. Each item gets its own "
        "outcome, in the order sent: a refused item does not stop the others.",
        examples=[BULK_REQUEST, BULK_RESPONSE],
    ),
    history=extend_schema(
        summary="A job's history",
        description="Every status change of the job, oldest first: the audit trail (who, "
        "when, why, and the change's details).",
    ),
    result=extend_schema(
        summary="A job's result",
        description="What the extractor returned for the latest successful attempt, or for "
        "`?attempt=N`. 404 while the job has none.",
    ),
    cancel=extend_schema(
        summary="Cancel a job",
        description="Stop an active job; the extractor is asked to drop its copy. A finished "
        "job answers 409 `invalid_transition`.",
    ),
    requeue=extend_schema(
        summary="Run a job again",
        description='Start a new attempt of a finished job. A succeeded job needs `"force": '
        "true` (409 `force_required` otherwise). Earlier attempts' history and results stay.",
    ),
)
extractors_docs = extend_schema_view(
    list=extend_schema(
        summary="List extractors",
        description="Every configured extractor, with whether it is enabled and its limits. "
        "A job's `extractor` is one of these slugs.",
    ),
    retrieve=extend_schema(
        summary="Get an extractor",
        description="One extractor, by slug: its adapter, model and limits.",
    ),
)
statuses_docs = extend_schema_view(
    list=extend_schema(
        summary="List statuses",
        description="The lifecycle's statuses in order, and which are terminal.",
    ),
    retrieve=extend_schema(
        summary="Get a status",
        description="One status, by code: its label and whether it is final.",
    ),
)
events_docs = extend_schema_view(
    list=extend_schema(
        summary="Read the event feed",
        description="Events of the jobs this client may see, oldest first. Poll with "
        "`after=<the last id you processed>` (to start from now, take `after` from "
        "`GET /api/v1/events/latest/`); events appear once they are settled (a second "
        "old), so ids never arrive out of order. An event's `payload` is the job as "
        "`GET /api/v1/jobs/{id}/` showed it then (its links are paths); a webhook's `data` is "
        "the same.",
        examples=[
            OpenApiExample(
                "An event",
                value=EVENT_EXAMPLE,
                response_only=True,
                status_codes=["200"],
            )
        ],
    ),
    latest=extend_schema(
        summary="Where the event feed is now",
        description="To tail the feed from now rather than from its first event: `after` is "
        "the id of the newest settled event (0 if none) and `next` the feed from there. "
        "Then poll `GET /api/v1/events/?after=<the last id processed>` (add `type` or `job` "
        "to filter). That gives every event published from now on, in id order, and no "
        "earlier one but those still settling (at most a second old when asked).",
        responses={
            200: inline_serializer(
                "EventFeedPosition",
                {"after": serializers.IntegerField(), "next": serializers.URLField()},
            )
        },
        examples=[
            OpenApiExample(
                "Now",
                value={"after": 48213, "next": f"{EVENTS_URL}?after=48213"},
                response_only=True,
                status_codes=["200"],
            )
        ],
    ),
)
stats_docs = extend_schema(
    summary="Job statistics",
    description="Counts by status and extractor for jobs created in the window, the success "
    "rate and turnaround percentiles of jobs completed in it, and the queue by priority now.",
    tags=["stats"],
)
healthz_docs = extend_schema(
    summary="Liveness", description="The process answers. No authentication.", tags=["health"]
)
readyz_docs = extend_schema(
    summary="Readiness",
    description="The database answers and a worker cluster and a dispatcher have beaten "
    "recently; 503 otherwise, with the failing checks. `degraded: true` (still ready) names "
    "the extractors whose circuit is open or paused under `checks.extractors`.",
    tags=["health"],
)

BATCH_REQUEST = OpenApiExample(
    "A grant request's files",
    value={
        "client_reference": "grant-request-4711",
        "metadata": {"grant_id": 4711},
        "close": True,
        "jobs": [
            {
                "extractor": "azure-layout",
                "file_id": "grant-4711/budget.pdf",
                "source_url": "https://files.fluxx.example/grants/4711/budget.pdf",
            },
            {
                "extractor": "azure-layout",
                "file_id": "grant-4711/audit.pdf",
                "source_url": "https://files.fluxx.example/grants/4711/audit.pdf",
            },
        ],
    },
    request_only=True,
)

batches_docs = extend_schema_view(
    list=extend_schema(
        summary="List batches",
        description="The batches this client may see, newest first, a cursor page at a time, "
        "each with its counts by status, progress and status. Filter by `status` (open, "
        "running, completed, completed_with_failures, cancelled) or `client_reference`.",
    ),
    retrieve=extend_schema(
        summary="Get a batch",
        description="One batch's aggregate, computed from its jobs: counts by status, "
        "progress, its status, first and last moments, its failures by error code and its "
        "first 100 failed jobs. Its jobs themselves: `GET /api/v1/jobs/?batch=<id>`.",
    ),
    create=extend_schema(
        summary="Create a batch",
        description="A batch with up to 500 jobs (URL sources), each item validated and "
        "created as in `POST /jobs/bulk/` with its own outcome. `client_reference` (your id "
        "for it) is unique among your batches (409 `batch_reference_exists`). `close: true` "
        "creates it closed; otherwise add jobs with `POST /batches/{id}/jobs/` and close it. "
        "With an `Idempotency-Key`, a replay answers 200 with the batch. Publishes "
        "`batch.created`; `batch.completed` follows once it is closed and its jobs have all "
        "ended.",
        examples=[BATCH_REQUEST],
    ),
    jobs=extend_schema(
        summary="Add jobs to a batch",
        description="Up to 500 more jobs, as in `POST /jobs/bulk/`, while the batch is open; "
        "a closed batch answers 409 `batch_closed`. Only the batch's own client adds jobs.",
    ),
    close=extend_schema(
        summary="Close a batch",
        description="The batch takes no more jobs; once its jobs have all ended (at once if "
        "they have) it completes and `batch.completed` is published, once. Closing a closed "
        "batch changes nothing.",
    ),
    cancel=extend_schema(
        summary="Cancel a batch",
        description="Closes the batch and cancels each of its active jobs (each audited, with "
        "the reason), then publishes `batch.cancelled` with the counts.",
    ),
    requeue=extend_schema(
        summary="Requeue a batch's failures",
        description="Starts a new attempt of each of its jobs that failed, timed out or was "
        'cancelled, and of its succeeded ones with `"force": true`, each audited as a '
        "job's requeue. The batch runs again and completes (and says so) again.",
    ),
)
