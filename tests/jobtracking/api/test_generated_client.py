"""A client generated from `/api/schema/` by openapi-python-client works for every operation:
each one is called through it against a live server. An operation the schema gains fails
`test_the_generated_client_covers_every_operation` until a call for it is registered below
(`@call("<operationId>")`, one small function)."""

import importlib
import io
import json
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import requests
from django.utils import timezone

from jobtracking.models import ServiceHeartbeat
from jobtracking.services import Actor, job_cancel
from jobtracking.services.tokens import token_issue
from tests.factories import (
    ExtractionJobFactory,
    ExtractionResultFactory,
    ExtractorFactory,
    api_job,
)
from tests.jobtracking.api.conftest import service_account

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("seeded_statuses")]

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "generated_jobs_client"
SOURCE_URL = "https://files.example.org/budget.pdf"


@pytest.fixture(scope="module")
def schema(live_server, django_db_setup, django_db_blocker) -> dict:
    """The schema as the live server serves it (to a client: it needs authentication)."""
    with django_db_blocker.unblock():
        reader = service_account("schema-reader")
        try:
            response = requests.get(
                f"{live_server.url}/api/schema/?format=json",
                headers={"Authorization": f"Token {token_issue(user=reader)}"},
                timeout=30,
            )
        finally:
            reader.delete()
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def sdk(schema, tmp_path_factory) -> ModuleType:
    """The generated package, made once for the module and imported."""
    folder = tmp_path_factory.mktemp("sdk")
    (folder / "schema.json").write_text(json.dumps(schema))
    (folder / "config.json").write_text(json.dumps({"post_hooks": []}))  # no ruff run needed
    subprocess.run(
        [
            *(GENERATOR, "generate", "--meta", "none", "--path", folder / "schema.json"),
            *("--output-path", folder / PACKAGE, "--config", folder / "config.json"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(folder))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def operation_modules(sdk: ModuleType) -> dict[str, ModuleType]:
    """The generated module of each operation (named by its operationId), by operationId."""
    api = importlib.import_module(f"{PACKAGE}.api")
    modules = {}
    for tag in pkgutil.iter_modules(api.__path__):
        package = importlib.import_module(f"{api.__name__}.{tag.name}")
        for operation in pkgutil.iter_modules(package.__path__):
            name = f"{package.__name__}.{operation.name}"
            modules[operation.name] = importlib.import_module(name)
    return modules


@dataclass
class Session:
    """A client of the generated package, authenticated as `user`, who may use `extractor`."""

    sdk: ModuleType
    client: Any
    user: Any
    extractor: Any
    operations: dict[str, ModuleType]
    called: set[str] = field(default_factory=set)

    @property
    def models(self) -> ModuleType:
        return importlib.import_module(f"{PACKAGE}.models")

    def call(self, operation_id: str, **arguments):
        """The operation's `sync_detailed` answer (status, headers, parsed body)."""
        self.called.add(operation_id)
        return self.operations[operation_id].sync_detailed(client=self.client, **arguments)

    def job(self, file_id: str = "f", **fields):
        return api_job(self.extractor, file_id, user=self.user, **fields)


@pytest.fixture
def session(sdk, live_server) -> Session:
    user = service_account("sdk-client")
    client = sdk.AuthenticatedClient(
        base_url=live_server.url, token=token_issue(user=user), prefix="Token", timeout=30
    )
    with client:
        yield Session(sdk, client, user, ExtractorFactory(slug="sandbox"), operation_modules(sdk))


CALLS: dict[str, Callable[[Session], None]] = {}


def call(operation_id: str):
    """Registers the function that calls `operation_id` and checks its answer."""

    def register(check: Callable[[Session], None]) -> Callable[[Session], None]:
        CALLS[operation_id] = check
        return check

    return register


# Jobs


@call("api_v1_jobs_create")
def create_as_json_then_replay_then_upload(s: Session) -> None:
    body = s.models.ExtractionJobJsonCreateRequest(
        extractor="sandbox",
        file_id="by-url",
        source_url=SOURCE_URL,
        priority=s.models.PriorityEnum.BULK,
        metadata=s.models.ExtractionJobJsonCreateRequestMetadata.from_dict({"grant_id": 4711}),
    )
    first = s.call("api_v1_jobs_create", body=body, idempotency_key="k-1")
    assert first.status_code == HTTPStatus.CREATED, first.content
    job = first.parsed
    assert (job.file_id, job.status, job.priority) == ("by-url", "pending", "bulk")
    assert job.metadata == {"grant_id": 4711} and not job.has_upload
    assert "Idempotent-Replayed" not in first.headers
    again = s.call("api_v1_jobs_create", body=body, idempotency_key="k-1")
    assert again.status_code == HTTPStatus.OK and again.parsed.id == job.id
    assert again.headers["Idempotent-Replayed"] == "true"

    upload = s.sdk.types.File(
        payload=io.BytesIO(b"item,amount\nrent,100\n"), file_name="budget.csv"
    )
    body = s.models.ExtractionJobCreateRequest(
        extractor="sandbox",
        file_id="by-upload",
        file=upload,
        options=s.models.ExtractionJobCreateRequestOptions.from_dict({"pages": "1-3"}),
    )
    made = s.call("api_v1_jobs_create", body=body)
    assert made.status_code == HTTPStatus.CREATED, made.content
    assert made.parsed.has_upload and made.parsed.file_name == "budget.csv"
    assert made.parsed.content_type == "text/csv" and made.parsed.file_size == 21
    assert made.parsed.options == {"pages": "1-3"}


@call("api_v1_jobs_bulk_create")
def bulk_create(s: Session) -> None:
    items = [
        {"extractor": "sandbox", "file_id": "bulk-1", "source_url": SOURCE_URL},
        {"extractor": "nope", "file_id": "bulk-2", "source_url": SOURCE_URL},
    ]
    body = s.models.BulkCreateRequest(
        jobs=[s.models.BulkCreateRequestJobsItem.from_dict(item) for item in items]
    )
    answer = s.call("api_v1_jobs_bulk_create", body=body)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (answer.parsed.created, answer.parsed.failed) == (1, 1)
    created, refused = answer.parsed.results
    assert created.status == "created" and created.job.file_id == "bulk-1"
    assert refused.status == "error" and refused.error["code"] == "validation_error"


@call("api_v1_jobs_list")
def list_jobs(s: Session) -> None:
    wanted = s.job("wanted")
    s.job("other")
    answer = s.call(
        "api_v1_jobs_list",
        file_id="wanted",
        status=[s.models.ApiV1JobsListStatusItem.PENDING],
        page_size=10,
    )
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert [str(job.id) for job in answer.parsed.results] == [str(wanted.pk)]


@call("api_v1_jobs_retrieve")
def retrieve_job(s: Session) -> None:
    job = s.job()
    answer = s.call("api_v1_jobs_retrieve", id=str(job.pk))
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (str(answer.parsed.id), answer.parsed.status) == (str(job.pk), "pending")
    assert answer.parsed.links.self_.endswith(f"/api/v1/jobs/{job.pk}/")


@call("api_v1_jobs_cancel_create")
def cancel_job(s: Session) -> None:
    job = s.job()
    body = s.models.JobActionRequest(reason="Not needed after all")
    answer = s.call("api_v1_jobs_cancel_create", id=str(job.pk), body=body)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert answer.parsed.status == "cancelled"
    assert job.status_changes.latest("changed_at").reason == "Not needed after all"


@call("api_v1_jobs_requeue_create")
def requeue_job(s: Session) -> None:
    job = s.job()
    job_cancel(job_id=job.pk, actor=Actor("api", s.user), reason="wrong file")
    body = s.models.JobRequeueRequest(reason="right file now", priority=s.models.PriorityEnum.BULK)
    answer = s.call("api_v1_jobs_requeue_create", id=str(job.pk), body=body)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (answer.parsed.status, answer.parsed.attempt, answer.parsed.priority) == (
        "pending",
        2,
        "bulk",
    )


@call("api_v1_jobs_history_list")
def job_history(s: Session) -> None:
    job = s.job()
    job_cancel(job_id=job.pk, actor=Actor("api", s.user), reason="wrong file")
    answer = s.call("api_v1_jobs_history_list", id=str(job.pk))
    assert answer.status_code == HTTPStatus.OK, answer.content
    moves = [(change.from_status, change.to_status) for change in answer.parsed]
    assert moves == [(None, "pending"), ("pending", "cancelled")]


@call("api_v1_jobs_result_retrieve")
def job_result(s: Session) -> None:
    job = ExtractionJobFactory(succeeded=True, extractor=s.extractor, requested_by=s.user)
    ExtractionResultFactory(job=job, payload={"pages": [{"number": 1, "text": "Total: 10"}]})
    answer = s.call("api_v1_jobs_result_retrieve", id=str(job.pk))
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (str(answer.parsed.job), answer.parsed.attempt) == (str(job.pk), 1)
    assert answer.parsed.payload == {"pages": [{"number": 1, "text": "Total: 10"}]}


# Events, reference data and statistics


@call("api_v1_events_list")
def list_events(s: Session) -> None:
    job = s.job()
    answer = s.call("api_v1_events_list", job=job.pk)
    assert answer.status_code == HTTPStatus.OK, answer.content
    (event,) = answer.parsed.results
    assert (event.type_, str(event.job)) == ("job.created", str(job.pk))
    assert str(event.payload.id) == str(job.pk)


@call("api_v1_extractors_list")
def list_extractors(s: Session) -> None:
    answer = s.call("api_v1_extractors_list")
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert [extractor.slug for extractor in answer.parsed] == ["sandbox"]


@call("api_v1_extractors_retrieve")
def retrieve_extractor(s: Session) -> None:
    answer = s.call("api_v1_extractors_retrieve", slug="sandbox")
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (answer.parsed.slug, answer.parsed.health.state) == ("sandbox", "closed")


@call("api_v1_statuses_list")
def list_statuses(s: Session) -> None:
    answer = s.call("api_v1_statuses_list")
    assert answer.status_code == HTTPStatus.OK, answer.content
    terminal = {status.code: status.terminal for status in answer.parsed}
    assert terminal["pending"] is False and terminal["succeeded"] is True


@call("api_v1_statuses_retrieve")
def retrieve_status(s: Session) -> None:
    answer = s.call("api_v1_statuses_retrieve", code="cancelled")
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (answer.parsed.code, answer.parsed.terminal) == ("cancelled", True)


@call("api_v1_stats_retrieve")
def stats(s: Session) -> None:
    s.job("a")
    s.job("b")
    answer = s.call("api_v1_stats_retrieve", window_hours=1)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert answer.parsed.window_hours == 1
    assert answer.parsed.created_by_status["pending"] == 2


# Health


@call("healthz_retrieve")
def healthz(s: Session) -> None:
    answer = s.call("healthz_retrieve")
    assert answer.status_code == HTTPStatus.OK
    assert answer.parsed.to_dict() == {"status": "ok"}


@call("readyz_retrieve")
def readyz(s: Session) -> None:
    for kind in ("cluster", "dispatcher"):
        ServiceHeartbeat.objects.create(name=f"{kind}@sdk", kind=kind, beat_at=timezone.now())
    answer = s.call("readyz_retrieve")
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert answer.parsed.to_dict()["ready"] is True


# The tests (after every registered call).


def test_the_generated_client_covers_every_operation(schema):
    operation_ids = {
        operation["operationId"]
        for methods in schema["paths"].values()
        for operation in methods.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    assert operation_ids - CALLS.keys() == set(), "operations the generated client never calls"
    assert CALLS.keys() - operation_ids == set(), "calls of operations the schema lost"


@pytest.mark.parametrize("operation_id", sorted(CALLS))
def test_the_generated_client_calls(session, operation_id):
    CALLS[operation_id](session)
    assert session.called == {operation_id}
