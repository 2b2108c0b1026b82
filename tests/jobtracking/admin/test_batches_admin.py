"""The batches list and the batch page as staff use them: columns, scoping, filters, search,
the page's counts, failures and events, the Cancel and Requeue buttons and actions with their
permissions and audit rows, and a bounded number of queries per list page."""

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobtracking import states
from jobtracking.models import ActorType, Batch, ExtractionJob, JobEvent, JobStatusChange, Priority
from jobtracking.services import SYSTEM, Actor, NewJob, job_transition
from jobtracking.services.batches import NewBatch, batch_create
from tests.factories import ExtractorFactory, UserFactory, WebhookDeliveryFactory
from tests.jobtracking.admin.conftest import JOBS, OPERATOR, staff

pytestmark = pytest.mark.django_db

BATCHES = "/admin/jobtracking/batch/"
# A staff member who looks after their own batches only (no view-all, no manage-all).
OWN = ("view_batch", "view_extractionjob", "cancel_extractionjob", "requeue_extractionjob")


def make_batch(user, reference: str, *file_ids: str, close: bool = True) -> Batch:
    extractor = ExtractorFactory()
    items = [
        NewJob(extractor=extractor, file_id=f, source_url=f"https://files.example.org/{f}.pdf")
        for f in file_ids
    ]
    new = NewBatch(client_reference=reference, close=close)
    return batch_create(new, items, actor=Actor(ActorType.API, user)).batch


def finish(job: ExtractionJob, status: str, code: str = "extraction_failed") -> None:
    def record_error(row):
        row.error_code, row.error_message = code, "Corrupt."

    job_transition(job_id=job.pk, to_status="submitting", actor=SYSTEM)
    job_transition(job_id=job.pk, to_status="submitted", actor=SYSTEM)
    prepare = record_error if status == states.FAILED else None
    job_transition(job_id=job.pk, to_status=status, actor=SYSTEM, prepare=prepare)


def jobs_of(batch: Batch) -> list[ExtractionJob]:
    return list(ExtractionJob.objects.filter(batch=batch).order_by("file_id"))


@pytest.fixture
def client_user():
    return UserFactory(username="riverbend")


@pytest.fixture
def mixed(client_user) -> Batch:
    """A closed batch of four: one succeeded, two failed (two codes), one still pending."""
    batch = make_batch(client_user, "grant-4711", "a", "b", "c", "d")
    a, b, c, _ = jobs_of(batch)
    finish(a, states.SUCCEEDED)
    finish(b, states.FAILED)
    finish(c, states.FAILED, code="password_protected")
    return batch


@pytest.fixture
def operator(client):
    user = staff(*OPERATOR, "view_batch", "requeue_extractionjob", "cancel_extractionjob")
    client.force_login(user)
    return user


def html_of(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_changelist_shows_reference_client_status_counts_and_progress(operator, client, mixed):
    response = client.get(BATCHES)
    headers = [str(header["text"]) for header in response.context["result_headers"]]
    assert headers[1:] == [
        "client reference",
        "client",
        "status",
        "total / active / failed",
        "progress",
        "created",
        "finished",
    ]
    html = response.content.decode()
    assert "grant-4711" in html
    assert "riverbend" in html
    assert 'class="batch-status batch-status-running"' in html
    assert "4 / 1 / 2" in html  # total / active / failed
    assert '<progress class="batch-progress" max="100" value="75.0">' in html
    assert "style=" not in html[html.index('id="result_list"') :].split("</table>")[0]


def test_changelist_limited_staff_sees_only_own_batches(client, mixed):
    own = staff(*OWN)
    make_batch(own, "own-batch", "x")
    client.force_login(own)
    html = html_of(client, BATCHES)
    assert "own-batch" in html
    assert "grant-4711" not in html
    assert client.get(f"{BATCHES}{mixed.pk}/change/").status_code == 302  # not in reach


def test_changelist_filters_by_status_and_created(operator, client, client_user, mixed):
    done = make_batch(client_user, "all-done", "z")
    finish(jobs_of(done)[0], states.SUCCEEDED)
    open_one = make_batch(client_user, "still-open", "y", close=False)
    Batch.objects.filter(pk=open_one.pk).update(created_at=timezone.now() - timedelta(days=10))

    completed = html_of(client, f"{BATCHES}?status=completed")
    assert "all-done" in completed and "grant-4711" not in completed
    running = html_of(client, f"{BATCHES}?status=running")
    assert "grant-4711" in running and "all-done" not in running
    assert "still-open" in html_of(client, f"{BATCHES}?status=open")
    recent = html_of(client, f"{BATCHES}?created=7")
    assert "still-open" not in recent and "all-done" in recent


def test_changelist_search_by_client_reference(operator, client, client_user, mixed):
    make_batch(client_user, "other-9", "q")
    html = html_of(client, f"{BATCHES}?q=grant-47")
    assert "grant-4711" in html and "other-9" not in html


def test_changelist_queries_do_not_grow_with_the_page(operator, client, client_user):
    make_batch(client_user, "first", "a", "b")
    with CaptureQueriesContext(connection) as few:
        html_of(client, BATCHES)
    for n in range(6):
        make_batch(client_user, f"more-{n}", f"m{n}a", f"m{n}b")
    with CaptureQueriesContext(connection) as many:
        html_of(client, BATCHES)
    assert len(many) == len(few)


def test_batch_page_has_summary_counts_failures_and_events(operator, client, mixed):
    html = html_of(client, f"{BATCHES}{mixed.pk}/change/")
    counts = html[html.index('id="batch-counts"') : html.index('id="failures-module"')]
    assert f"?batch={mixed.pk}&amp;status=failed" in counts
    assert ">2</a>" in counts
    failures = html[html.index('id="batch-failures"') : html.index('id="batch-failed-jobs"')]
    assert "password_protected" in failures and "extraction_failed" in failures
    assert f"?batch={mixed.pk}&amp;error_code__exact=password_protected" in failures
    timeline = html[html.index('id="batch-timeline"') :]
    assert states.BATCH_CREATED in timeline
    assert "Pending: 4" in timeline  # the counts when it was created
    assert 'id="cancel-button"' in html and 'id="requeue-button"' in html


def test_jobs_changelist_filters_by_batch(operator, client, client_user, mixed):
    make_batch(client_user, "other", "elsewhere")
    html = html_of(client, f"{JOBS}?batch={mixed.pk}&status=failed")
    b, c = jobs_of(mixed)[1:3]
    assert str(b.pk)[-12:] in html and str(c.pk)[-12:] in html
    assert "elsewhere" not in html
    assert str(b.pk)[-12:] not in html_of(client, f"{JOBS}?batch=not-a-uuid")


def test_job_page_links_to_its_batch(operator, client, mixed):
    html = html_of(client, f"{JOBS}{jobs_of(mixed)[0].pk}/change/")
    assert f"{BATCHES}{mixed.pk}/change/" in html


def test_cancel_button_cancels_active_jobs_with_audit_rows(operator, client, mixed):
    response = client.post(f"{BATCHES}{mixed.pk}/cancel/", {"reason": "grant withdrawn"})
    assert response.status_code == 302
    pending = jobs_of(mixed)[3]
    pending.refresh_from_db()
    assert pending.status_id == states.CANCELLED
    change = JobStatusChange.objects.get(job=pending, to_status_id=states.CANCELLED)
    assert (change.actor_type, change.actor, change.reason) == (
        ActorType.ADMIN,
        operator,
        "grant withdrawn",
    )
    assert JobEvent.objects.filter(batch=mixed, type=states.BATCH_CANCELLED).count() == 1
    assert LogEntry.objects.filter(object_id=str(mixed.pk), user=operator).exists()


def test_a_finished_batch_offers_no_cancel(operator, client, client_user):
    batch = make_batch(client_user, "done", "f-1")
    finish(jobs_of(batch)[0], "succeeded")
    html = html_of(client, f"{BATCHES}{batch.pk}/change/")
    assert "Completed" in html and 'id="cancel-button"' not in html
    response = client.post(f"{BATCHES}{batch.pk}/cancel/", {"reason": "late"}, follow=True)
    assert "nothing to cancel" in response.content.decode()
    batch.refresh_from_db()
    assert batch.cancelled_at is None


def test_requeue_button_requeues_failed_jobs_with_priority(operator, client, mixed):
    response = client.post(
        f"{BATCHES}{mixed.pk}/requeue/",
        {"reason": "extractor fixed", "priority": str(Priority.BULK.value)},
    )
    assert response.status_code == 302
    succeeded, b, c, _ = jobs_of(mixed)
    assert {b.status_id, c.status_id} == {states.PENDING}
    assert (b.attempt, b.priority) == (2, Priority.BULK)
    assert succeeded.status_id == states.SUCCEEDED  # not without force
    requeued = JobStatusChange.objects.filter(job__in=[b, c], attempt=2, reason="extractor fixed")
    assert requeued.count() == 2
    assert set(requeued.values_list("actor_type", flat=True)) == {ActorType.ADMIN}


def test_buttons_need_the_action_permission_and_manage_all(client, mixed):
    viewer = staff("view_batch", "view_extractionjob", "view_all_extractionjobs")
    client.force_login(viewer)
    html = html_of(client, f"{BATCHES}{mixed.pk}/change/")
    assert 'id="cancel-button"' not in html and 'id="requeue-button"' not in html
    assert client.post(f"{BATCHES}{mixed.pk}/cancel/", {}).status_code == 403

    # The action's permission is not enough for another client's batch.
    actor = staff("view_batch", "view_all_extractionjobs", "cancel_extractionjob")
    client.force_login(actor)
    assert client.post(f"{BATCHES}{mixed.pk}/cancel/", {}).status_code == 403
    assert Batch.objects.get(pk=mixed.pk).cancelled_at is None
    assert not JobStatusChange.objects.filter(job__batch=mixed, actor_type=ActorType.ADMIN)


def test_actions_cancel_only_batches_the_staff_member_may_act_on(client, client_user, mixed):
    own = staff(*OWN, "view_all_extractionjobs")
    mine = make_batch(own, "mine", "m1")
    client.force_login(own)
    response = client.post(
        BATCHES,
        {
            "action": "cancel_selected",
            "_selected_action": [str(mine.pk), str(mixed.pk)],
            "reason": "duplicate",
        },
    )
    assert response.status_code == 302
    assert Batch.objects.get(pk=mine.pk).cancelled_at is not None
    assert Batch.objects.get(pk=mixed.pk).cancelled_at is None
    change = JobStatusChange.objects.get(job__batch=mine, to_status_id=states.CANCELLED)
    assert (change.actor, change.reason) == (own, "duplicate")


def test_action_requeues_failed_jobs_of_selected_batches(operator, client, mixed):
    selection = {"action": "requeue_selected", "_selected_action": [str(mixed.pk)]}
    before = sorted(job.status_id for job in jobs_of(mixed))
    client.post(BATCHES, selection)  # without a reason: nothing
    assert sorted(job.status_id for job in jobs_of(mixed)) == before
    client.post(BATCHES, {**selection, "reason": "source fixed"})
    statuses = sorted(job.status_id for job in jobs_of(mixed))
    assert statuses == sorted([states.SUCCEEDED, states.PENDING, states.PENDING, states.PENDING])


def test_webhook_deliveries_of_own_batch_events_are_visible(client, client_user):
    own = staff("view_webhookdelivery")
    batch = make_batch(own, "hooked", "h")
    other = make_batch(client_user, "not-mine", "n")
    mine = WebhookDeliveryFactory(event=JobEvent.objects.get(batch=batch))
    theirs = WebhookDeliveryFactory(event=JobEvent.objects.get(batch=other))
    client.force_login(own)
    assert client.get(f"/admin/jobtracking/webhookdelivery/{mine.pk}/change/").status_code == 200
    assert client.get(f"/admin/jobtracking/webhookdelivery/{theirs.pk}/change/").status_code == 302


def test_events_list_shows_batch_events_to_their_client(client):
    own = staff("view_jobevent")
    batch = make_batch(own, "evented", "e")
    client.force_login(own)
    html = html_of(client, "/admin/jobtracking/jobevent/")
    assert f"{BATCHES}{batch.pk}/change/" in html
