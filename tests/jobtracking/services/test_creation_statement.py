"""Creation on PostgreSQL is one statement: every row a new job needs, its webhook deliveries
and the dispatcher's wake-up, all or nothing, with a savepoint inside a caller's transaction."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from jobtracking.errors import ActiveJobExistsError
from jobtracking.models import ActorType, ExtractionJob, JobEvent, JobStatusChange, WebhookDelivery
from jobtracking.services.creation import NewJob, job_create_many
from jobtracking.services.transitions import Actor
from tests.factories import ExtractorFactory, UserFactory, WebhookSubscriptionFactory, api_job

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL statement"),
]


def test_one_statement_writes_the_job_its_history_event_deliveries_and_wake_up():
    extractor = ExtractorFactory()
    user = UserFactory()
    everything = WebhookSubscriptionFactory(event_types=[], all_jobs=True)
    created_only = WebhookSubscriptionFactory(event_types=["job.created"], all_jobs=True)
    WebhookSubscriptionFactory(event_types=["job.failed"], all_jobs=True)  # not this event
    WebhookSubscriptionFactory(active=False, all_jobs=True)
    owners = WebhookSubscriptionFactory(created_by=user)  # the job's requester's own
    WebhookSubscriptionFactory(created_by=UserFactory())  # another client's: not their job
    # The connection has the statement prepared now, and the process knows whose budgets refuse.
    api_job(extractor, file_id="earlier", user=user)
    with CaptureQueriesContext(connection) as queries:
        job = api_job(extractor, metadata={"grant": 4711}, user=user)
    writes = [q["sql"] for q in queries if "SAVEPOINT" not in q["sql"]]
    assert len(writes) == 1 and writes[0].startswith("WITH new_jobs AS (INSERT")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT from_sql FROM pg_prepared_statements WHERE statement LIKE 'WITH new_jobs%'"
        )
        # Prepared once on the connection, by the protocol (psycopg), not by PREPARE.
        assert cursor.fetchall() == [(False,)]
    stored = ExtractionJob.objects.get(pk=job.pk)
    assert (stored.status_id, stored.metadata, stored.due_at) == (
        "pending",
        {"grant": 4711},
        job.due_at,
    )
    change = JobStatusChange.objects.get(job=job)
    assert (change.to_status_id, change.actor_type, change.actor) == (
        "pending",
        "api",
        job.requested_by,
    )
    event = JobEvent.objects.get(job=job)
    assert event.type == "job.created" and event.payload["id"] == str(job.pk)
    receivers = set(
        WebhookDelivery.objects.filter(event=event).values_list("subscription", flat=True)
    )
    assert receivers == {everything.pk, created_only.pk, owners.pk}
    assert set(WebhookDelivery.objects.values_list("state", "attempts")) == {("pending", 0)}


def test_a_conflict_inside_a_transaction_leaves_the_transaction_usable():
    extractor = ExtractorFactory()
    with transaction.atomic():
        first = api_job(extractor)
        with pytest.raises(ActiveJobExistsError, match=str(first.pk)):
            api_job(extractor)
        other = api_job(extractor, file_id="f-2")
    assert set(ExtractionJob.objects.values_list("pk", flat=True)) == {first.pk, other.pk}
    assert JobStatusChange.objects.count() == 2 and JobEvent.objects.count() == 2


def test_a_refused_creation_writes_nothing():
    extractor = ExtractorFactory()
    api_job(extractor)
    with pytest.raises(ActiveJobExistsError):
        api_job(extractor)
    assert (ExtractionJob.objects.count(), JobStatusChange.objects.count()) == (1, 1)
    assert JobEvent.objects.count() == 1


def test_a_bulk_create_leaves_out_the_jobs_whose_file_an_active_job_holds():
    extractor = ExtractorFactory()
    WebhookSubscriptionFactory(event_types=[])
    held = api_job(extractor, file_id="held")
    items = [
        NewJob(extractor=extractor, file_id=file_id, source_url="https://a.test/f.pdf")
        for file_id in ("held", "new", "held", "new")
    ]
    with CaptureQueriesContext(connection) as queries:
        outcomes = job_create_many(items, actor=Actor(ActorType.SYSTEM))
    created = outcomes[1].job
    assert created is not None and created.file_id == "new"
    # Every refusal names the job that holds the file: stored, or created by this batch.
    assert [outcome.error.extra["job_id"] for outcome in outcomes if outcome.error] == [
        str(held.pk),
        str(held.pk),
        str(created.pk),
    ]
    assert set(ExtractionJob.objects.values_list("file_id", flat=True)) == {"held", "new"}
    assert JobStatusChange.objects.filter(job__file_id="new").count() == 1
    assert JobEvent.objects.count() == WebhookDelivery.objects.count() == 2  # one each
    # No look-up before the insert: the insert and the refused file's holder.
    sql = [
        q["sql"].split()[0] for q in queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]
    assert sql == ["WITH", "SELECT"]
