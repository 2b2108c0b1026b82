"""A client generated from `/api/schema/` by openapi-python-client works for every operation:
each one is called through it against a live server. An operation the schema gains fails
`test_the_generated_client_covers_every_operation` until a call for it is registered below
(`@call("<operationId>")`, one small function)."""

import importlib
import io
import json
import pkgutil
import re
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

from jobtracking.models import DeliveryState, ServiceHeartbeat, WebhookDelivery
from jobtracking.services import Actor, Move, job_cancel, jobs_transition
from jobtracking.services.tokens import token_issue
from tests.factories import (
    ExtractionJobFactory,
    ExtractionResultFactory,
    ExtractorFactory,
    api_job,
)
from tests.jobtracking.api.conftest import WEBHOOK_PERMISSIONS, service_account

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
    receiver: Any  # a local webhook receiver (pytest-httpserver)
    called: set[str] = field(default_factory=set)

    @property
    def models(self) -> ModuleType:
        return importlib.import_module(f"{PACKAGE}.models")

    def call(self, operation_id: str, **arguments):
        """The operation's `sync_detailed` answer (status, headers, parsed body)."""
        self.called.add(operation_id)
        return self.operations[operation_id].sync_detailed(client=self.client, **arguments)

    def arrange(self, operation_id: str, **arguments):
        """An operation used to set the scene for another, so not counted as exercised."""
        return self.operations[operation_id].sync_detailed(client=self.client, **arguments)

    def job(self, file_id: str = "f", **fields):
        return api_job(self.extractor, file_id, user=self.user, **fields)


@pytest.fixture
def session(sdk, live_server, httpserver, settings) -> Session:
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the local webhook receiver
    user = service_account("sdk-client", *WEBHOOK_PERMISSIONS)
    client = sdk.AuthenticatedClient(
        base_url=live_server.url, token=token_issue(user=user), prefix="Token", timeout=30
    )
    extractor = ExtractorFactory(slug="sandbox")
    with client:
        yield Session(sdk, client, user, extractor, operation_modules(sdk), httpserver)


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


@call("api_v1_events_latest_retrieve")
def latest_event(s: Session) -> None:
    s.job("before")
    answer = s.call("api_v1_events_latest_retrieve")
    assert answer.status_code == HTTPStatus.OK, answer.content
    after = answer.parsed.after
    s.job("after")
    tail = s.arrange("api_v1_events_list", after=after)
    assert [event.payload.file_id for event in tail.parsed.results] == ["after"]


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


@call("api_v1_usage_retrieve")
def usage(s: Session) -> None:
    job = ExtractionJobFactory(extractor=s.extractor, processing=True, requested_by=s.user)
    jobs_transition([Move(job.pk, "succeeded", billed_pages=3)], actor=Actor.system())
    today = timezone.now().date()
    answer = s.call("api_v1_usage_retrieve", from_=today, to=today, group_by="client,day")
    assert answer.status_code == HTTPStatus.OK, answer.content
    [line] = answer.parsed.results
    assert (line.pages, line.jobs, line.cost) == (3, 1, None)
    assert line.group.to_dict() == {"client": "sdk-client", "day": today.isoformat()}


# Batches


def new_batch(s: Session, *file_ids: str, close: bool = False):
    """A batch of URL jobs made through the generated client."""
    items = [{"extractor": "sandbox", "file_id": f, "source_url": SOURCE_URL} for f in file_ids]
    body = s.models.BatchCreateRequest(
        jobs=[s.models.BatchCreateRequestJobsItem.from_dict(item) for item in items],
        client_reference=f"grant-{'-'.join(file_ids)}",
        close=close,
    )
    answer = s.arrange("api_v1_batches_create", body=body, idempotency_key=body.client_reference)
    assert answer.status_code == HTTPStatus.CREATED, answer.content
    return answer.parsed


@call("api_v1_batches_create")
def create_batch(s: Session) -> None:
    s.called.add("api_v1_batches_create")
    made = new_batch(s, "b-1", "b-2")
    assert (made.created, made.failed) == (2, 0)
    assert (made.batch.status, made.batch.total, made.batch.client_reference) == (
        "open",
        2,
        "grant-b-1-b-2",
    )
    assert [item.job.file_id for item in made.results] == ["b-1", "b-2"]


@call("api_v1_batches_list")
def list_batches(s: Session) -> None:
    wanted = new_batch(s, "l-1").batch
    new_batch(s, "l-2", close=True)
    answer = s.call("api_v1_batches_list", status=s.models.ApiV1BatchesListStatus.OPEN)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert [batch.id for batch in answer.parsed.results] == [wanted.id]


@call("api_v1_batches_retrieve")
def retrieve_batch(s: Session) -> None:
    made = new_batch(s, "r-1", "r-2", close=True).batch
    answer = s.call("api_v1_batches_retrieve", id=str(made.id))
    assert answer.status_code == HTTPStatus.OK, answer.content
    batch = answer.parsed
    assert (batch.status, batch.total, batch.active, batch.progress) == ("running", 2, 2, 0.0)
    assert batch.by_status["pending"] == 2


@call("api_v1_batches_jobs_create")
def add_jobs_to_batch(s: Session) -> None:
    made = new_batch(s, "a-1").batch
    item = {"extractor": "sandbox", "file_id": "a-2", "source_url": SOURCE_URL}
    body = s.models.BatchJobsRequest(jobs=[s.models.BatchJobsRequestJobsItem.from_dict(item)])
    answer = s.call("api_v1_batches_jobs_create", id=str(made.id), body=body)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (answer.parsed.created, answer.parsed.results[0].job.file_id) == (1, "a-2")


@call("api_v1_batches_close_create")
def close_batch(s: Session) -> None:
    made = new_batch(s, "c-1").batch
    answer = s.call("api_v1_batches_close_create", id=str(made.id))
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert answer.parsed.status == "running" and answer.parsed.closed_at


@call("api_v1_batches_cancel_create")
def cancel_batch(s: Session) -> None:
    made = new_batch(s, "x-1", "x-2").batch
    body = s.models.BatchCancelRequest(reason="grant request withdrawn")
    answer = s.call("api_v1_batches_cancel_create", id=str(made.id), body=body)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (answer.parsed.moved, answer.parsed.batch.status) == (2, "cancelled")


@call("api_v1_batches_requeue_create")
def requeue_batch(s: Session) -> None:
    made = new_batch(s, "q-1", close=True)
    job_cancel(job_id=made.results[0].job.id, actor=Actor("api", s.user), reason="wrong file")
    body = s.models.BatchRequeueRequest(reason="right file now")
    answer = s.call("api_v1_batches_requeue_create", id=str(made.batch.id), body=body)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (answer.parsed.moved, answer.parsed.batch.status) == (1, "running")


# Webhook endpoints


def new_endpoint(s: Session, **fields):
    if "event_types" not in fields:
        fields["all_event_types"] = True
    body = s.models.WebhookEndpointInputRequest(
        url=s.receiver.url_for("/hooks"), description="sdk", **fields
    )
    answer = s.arrange("api_v1_webhook_endpoints_create", body=body)
    assert answer.status_code == HTTPStatus.CREATED, answer.content
    return answer.parsed


@call("api_v1_webhook_endpoints_create")
def create_endpoint(s: Session) -> None:
    s.called.add("api_v1_webhook_endpoints_create")
    endpoint = new_endpoint(s, event_types=[s.models.EventTypeEnum.JOB_SUCCEEDED])
    assert endpoint.secret.startswith("whsec_") and endpoint.event_types == ["job.succeeded"]


@call("api_v1_webhook_endpoints_list")
def list_endpoints(s: Session) -> None:
    endpoint = new_endpoint(s)
    answer = s.call("api_v1_webhook_endpoints_list")
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert [e.id for e in answer.parsed.results] == [endpoint.id]
    assert "secret" not in answer.parsed.results[0].to_dict()


@call("api_v1_webhook_endpoints_retrieve")
def retrieve_endpoint(s: Session) -> None:
    endpoint = new_endpoint(s)
    answer = s.call("api_v1_webhook_endpoints_retrieve", id=endpoint.id)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (answer.parsed.url, answer.parsed.description) == (endpoint.url, "sdk")


@call("api_v1_webhook_endpoints_partial_update")
def update_endpoint(s: Session) -> None:
    endpoint = new_endpoint(s)
    body = s.models.PatchedWebhookEndpointInputRequest(enabled=False)
    answer = s.call("api_v1_webhook_endpoints_partial_update", id=endpoint.id, body=body)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (answer.parsed.enabled, answer.parsed.description) == (False, "sdk")


@call("api_v1_webhook_endpoints_destroy")
def delete_endpoint(s: Session) -> None:
    endpoint = new_endpoint(s)
    answer = s.call("api_v1_webhook_endpoints_destroy", id=endpoint.id)
    assert answer.status_code == HTTPStatus.NO_CONTENT, answer.content
    gone = s.arrange("api_v1_webhook_endpoints_retrieve", id=endpoint.id)
    assert gone.status_code == HTTPStatus.NOT_FOUND


@call("api_v1_webhook_endpoints_rotate_secret_create")
def rotate_endpoint_secret(s: Session) -> None:
    endpoint = new_endpoint(s)
    answer = s.call("api_v1_webhook_endpoints_rotate_secret_create", id=endpoint.id)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert answer.parsed.secret.startswith("whsec_") and answer.parsed.secret != endpoint.secret


@call("api_v1_webhook_endpoints_test_create")
def send_test_event(s: Session) -> None:
    s.receiver.expect_request("/hooks", method="POST").respond_with_data("thanks")
    endpoint = new_endpoint(s)
    answer = s.call("api_v1_webhook_endpoints_test_create", id=endpoint.id)
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert (answer.parsed.delivered, answer.parsed.http_status) == (True, 200)
    assert answer.parsed.response_excerpt == "thanks"


@call("api_v1_webhook_endpoints_deliveries_list")
def list_endpoint_deliveries(s: Session) -> None:
    endpoint = new_endpoint(s, event_types=[s.models.EventTypeEnum.JOB_CREATED])
    job = s.job()
    answer = s.call("api_v1_webhook_endpoints_deliveries_list", id=endpoint.id)
    assert answer.status_code == HTTPStatus.OK, answer.content
    (delivery,) = answer.parsed.results
    assert (delivery.event_type, str(delivery.job), delivery.attempts) == (
        "job.created",
        str(job.pk),
        [],
    )


@call("api_v1_webhook_endpoints_deliveries_redeliver_create")
def redeliver(s: Session) -> None:
    endpoint = new_endpoint(s, event_types=[s.models.EventTypeEnum.JOB_CREATED])
    s.job()
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(state=DeliveryState.DEAD, attempts=8)
    answer = s.call(
        "api_v1_webhook_endpoints_deliveries_redeliver_create",
        id=endpoint.id,
        delivery_id=delivery.pk,
    )
    assert answer.status_code == HTTPStatus.ACCEPTED, answer.content
    assert answer.parsed.state == "pending"


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


def test_the_docs_generated_client_example_runs(sdk, live_server):
    # docs/api.md's example, as written, against the live server and this module's package.
    docs = (Path(__file__).parents[3] / "docs" / "api.md").read_text()
    (example,) = re.findall(r"```python generated-client\n(.*?)```", docs, re.S)
    user = service_account("docs-reader")
    ExtractorFactory(slug="sandbox")
    scope = {"KEY": token_issue(user=user)}
    code = example.replace("jobs_client", PACKAGE).replace("http://127.0.0.1:8000", live_server.url)
    exec(code, scope)
    assert scope["answer"].status_code == HTTPStatus.CREATED, scope["answer"].content
    assert scope["job"].file_id == "F-1"


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
