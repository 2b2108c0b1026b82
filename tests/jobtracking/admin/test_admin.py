"""The admin console through Django's test client: every page, filter, action and permission."""

import contextlib
import csv
import io
import zlib
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core import signing
from django.utils import timezone

from jobtracking.models import (
    ExtractionJob,
    JobStatusChange,
    WebhookDelivery,
    WebhookSubscription,
)
from jobtracking.services import Actor, NewJob, job_create
from jobtracking.webhooks.sending import subscription_secret
from tests.factories import (
    ExtractionJobFactory,
    ExtractionResultFactory,
    ExtractorFactory,
    JobEventFactory,
    UserFactory,
    WebhookDeliveryFactory,
    WebhookSubscriptionFactory,
)
from tests.jobtracking.admin.conftest import JOBS, OPERATOR, staff

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet():
    sandbox = ExtractorFactory(slug="sandbox")
    now = timezone.now()
    return {
        "failed": ExtractionJobFactory(extractor=sandbox, failed=True, file_name="budget.pdf"),
        "succeeded": ExtractionJobFactory(extractor=sandbox, succeeded=True),
        "old": ExtractionJobFactory(
            extractor=ExtractorFactory(slug="azure"),
            timed_out=True,
            created_at=now - timedelta(days=40),
            completed_at=now - timedelta(days=40),
        ),
        "pending": ExtractionJobFactory(extractor=sandbox),
    }


def listed(response) -> set[str]:
    assert response.status_code == 200
    return {str(job.pk) for job in response.context["cl"].result_list}


def test_changelist_shows_columns_and_no_full_count(
    root_client, fleet, django_assert_max_num_queries
):
    with django_assert_max_num_queries(15):
        response = root_client.get(JOBS)
    assert listed(response) == {str(job.pk) for job in fleet.values()}
    html = response.content.decode()
    assert "budget.pdf" in html and "background:#dc3545" in html  # coloured failed status
    assert response.context["cl"].show_full_result_count is False


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status__code__exact=failed", {"failed"}),
        ("extractor__id__exact={azure}", {"old"}),
        ("error_code__exact=extraction_failed", {"failed"}),
        ("created=30", {"failed", "succeeded", "pending"}),
        ("completed=7", {"failed", "succeeded"}),
        ("q=budget", {"failed"}),
        ("q={failed_id}", {"failed"}),
    ],
)
def test_changelist_filters_and_search(root_client, fleet, query, expected):
    query = query.format(azure=fleet["old"].extractor_id, failed_id=fleet["failed"].pk)
    assert listed(root_client.get(f"{JOBS}?{query}")) == {str(fleet[n].pk) for n in expected}


def test_detail_page_shows_timeline_results_and_events(root_client):
    job = job_create(
        NewJob(
            extractor=ExtractorFactory(), file_id="f", source_url="https://files.example.org/f.pdf"
        ),
        actor=Actor("api"),
    )
    ExtractionResultFactory(job=job, payload={"pages": [{"text": "Total revenue: 5"}]})
    html = root_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "Status timeline" in html and "job.created" in html and "View the full result" in html
    assert 'name="_save"' not in html  # read-only


def test_requeue_action_records_the_admin_and_reason(fleet, client):
    user = staff(*OPERATOR, "requeue_extractionjob")
    client.force_login(user)
    response = client.post(
        JOBS,
        {"action": "requeue_selected", "_selected_action": [fleet["failed"].pk], "reason": "fixed"},
        follow=True,
    )
    assert response.status_code == 200
    change = JobStatusChange.objects.get(job=fleet["failed"])
    assert (change.actor_type, change.actor, change.reason) == ("admin", user, "fixed")
    assert ExtractionJob.objects.get(pk=fleet["failed"].pk).status_id == "pending"


def test_set_priority_action_changes_active_jobs_and_records_it(fleet, client):
    user = staff(*OPERATOR, "requeue_extractionjob")
    client.force_login(user)
    ids = [fleet["pending"].pk, fleet["failed"].pk]
    page = client.post(
        JOBS,
        {"action": "set_priority", "_selected_action": ids, "priority": "interactive"},
        follow=True,
    ).content.decode()
    assert "1 job(s) set to interactive" in page and "1 refused" in page
    assert ExtractionJob.objects.get(pk=fleet["pending"].pk).priority == 0
    change = JobStatusChange.objects.get(job=fleet["pending"])
    assert (change.actor, change.details["priority_to"]) == (user, "interactive")
    filtered = client.get(JOBS, {"priority__exact": 0}).content.decode()
    assert str(fleet["pending"].pk)[-12:] in filtered
    assert str(fleet["failed"].pk)[-12:] not in filtered


def test_requeue_of_succeeded_needs_force_and_reports_refusals(root_client, fleet):
    ids = [fleet["succeeded"].pk]
    response = root_client.post(
        JOBS, {"action": "requeue_selected", "_selected_action": ids, "reason": "r"}, follow=True
    )
    assert "refused" in response.content.decode()
    root_client.post(
        JOBS, {"action": "requeue_selected", "_selected_action": ids, "force": "on", "reason": "r"}
    )
    assert ExtractionJob.objects.get(pk=ids[0]).attempt == 2


def test_a_requeue_list_action_without_a_reason_requeues_nothing(root_client, fleet):
    selection = {"action": "requeue_selected", "_selected_action": [fleet["failed"].pk]}
    response = root_client.post(JOBS, {**selection, "reason": "  "}, follow=True)
    assert "Give a reason for the requeue" in response.content.decode()
    assert ExtractionJob.objects.get(pk=fleet["failed"].pk).status_id == "failed"


def test_staff_without_requeue_permission_cannot_requeue(fleet, client):
    client.force_login(staff(*OPERATOR))
    page = client.get(JOBS).content.decode()
    assert "requeue_selected" not in page and "cancel_selected" not in page
    client.post(JOBS, {"action": "requeue_selected", "_selected_action": [fleet["failed"].pk]})
    assert ExtractionJob.objects.get(pk=fleet["failed"].pk).status_id == "failed"


def test_cancel_action_needs_its_permission(fleet, client):
    client.force_login(staff(*OPERATOR, "cancel_extractionjob"))
    client.post(JOBS, {"action": "cancel_selected", "_selected_action": [fleet["pending"].pk]})
    assert ExtractionJob.objects.get(pk=fleet["pending"].pk).status_id == "cancelled"


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_csv_export_neutralises_formulas_in_client_text(root_client, start):
    job = ExtractionJobFactory(
        file_id=f'{start}HYPERLINK("http://evil.example")', file_name=f"{start}cmd|'/c calc'!A1"
    )
    response = root_client.post(JOBS, {"action": "export_csv", "_selected_action": [job.pk]})
    body = b"".join(response.streaming_content).decode()
    (row,) = list(csv.reader(io.StringIO(body)))[1:]
    assert row[3] == f'\'{start}HYPERLINK("http://evil.example")'
    assert row[4] == f"'{start}cmd|'/c calc'!A1"
    assert row[0] == str(job.pk)  # ids, numbers and dates are left alone


def test_csv_export_streams_the_filtered_set(root_client, fleet):
    response = root_client.post(f"{JOBS}?status__code__exact=failed", {"action": "export_csv"})
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert lines[0].startswith("Job ID,Status,Extractor,File ID,File name")
    assert len(lines) == 2 and str(fleet["failed"].pk) in lines[1]


def test_audit_log_is_read_only_even_for_superusers(root_client, fleet):
    job = fleet["failed"]
    change = JobStatusChange.objects.create(
        job=job, to_status_id="failed", attempt=1, actor_type="system"
    )
    assert root_client.get("/admin/jobtracking/jobstatuschange/").status_code == 200
    assert root_client.get("/admin/jobtracking/jobstatuschange/add/").status_code == 403
    detail = root_client.get(f"/admin/jobtracking/jobstatuschange/{change.pk}/change/")
    assert 'name="_save"' not in detail.content.decode()
    assert (
        root_client.post(
            f"/admin/jobtracking/jobstatuschange/{change.pk}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )
    assert JobStatusChange.objects.filter(pk=change.pk).exists()


@pytest.mark.parametrize(
    "query",
    ["to_status__code__exact=failed", "actor_type__exact=system", "changed_at__gte=2000-01-01"],
)
def test_audit_log_filters(root_client, fleet, query):
    JobStatusChange.objects.create(
        job=fleet["failed"], to_status_id="failed", attempt=1, actor_type="system"
    )
    response = root_client.get(f"/admin/jobtracking/jobstatuschange/?{query}")
    assert response.status_code == 200 and len(response.context["cl"].result_list) == 1


def test_audit_log_actor_filter_lists_only_actors_of_visible_jobs(client):
    member = staff("view_jobstatuschange")
    mine = ExtractionJobFactory(requested_by=member, failed=True)
    theirs = ExtractionJobFactory(requested_by=UserFactory(username="client-d"), failed=True)
    for job, actor in ((mine, "operator-of-mine"), (theirs, "operator-of-theirs")):
        JobStatusChange.objects.create(
            job=job,
            to_status_id="failed",
            attempt=1,
            actor_type="admin",
            actor=UserFactory(username=actor),
        )
    client.force_login(member)
    response = client.get("/admin/jobtracking/jobstatuschange/")
    (actors,) = [spec for spec in response.context["cl"].filter_specs if spec.title == "actor"]
    assert [name for _, name in actors.lookup_choices] == ["operator-of-mine"]
    assert "operator-of-theirs" not in response.content.decode()
    assert {change.job_id for change in response.context["cl"].result_list} == {mine.pk}


@pytest.mark.parametrize(
    ("page", "factory"),
    [("extractionresult", ExtractionResultFactory), ("jobevent", JobEventFactory)],
)
def test_results_and_events_pages_show_only_visible_jobs_without_view_all(client, page, factory):
    member = staff(f"view_{page}")
    mine = factory(job=ExtractionJobFactory(requested_by=member, succeeded=True))
    factory(job=ExtractionJobFactory(requested_by=UserFactory(username="client-e"), succeeded=True))
    client.force_login(member)
    response = client.get(f"/admin/jobtracking/{page}/")
    assert [row.pk for row in response.context["cl"].result_list] == [mine.pk]


def test_extractor_connection_check_action(root_client, sandbox):
    extractor = ExtractorFactory(slug="sb", adapter="sandbox", base_url=sandbox.url)
    response = root_client.post(
        "/admin/extraction/extractor/",
        {"action": "check_connection", "_selected_action": [extractor.pk]},
        follow=True,
    )
    text = [str(m) for m in response.context["messages"]]
    assert any(m.startswith("sb: GET") and "answered" in m for m in text), text


def test_extractor_page_never_shows_the_key(root_client, monkeypatch):
    monkeypatch.setenv("EXTRACTOR_ADMIN_TEST_KEY", "sk-admin-secret-999")
    extractor = ExtractorFactory(api_key_env="EXTRACTOR_ADMIN_TEST_KEY")
    html = root_client.get(f"/admin/extraction/extractor/{extractor.pk}/change/").content.decode()
    assert "sk-admin-secret-999" not in html and "EXTRACTOR_ADMIN_TEST_KEY" in html


def test_webhook_subscription_secret_is_shown_once_on_rotation(root_client, settings):
    settings.OUTBOUND_ALLOWED_HOSTS = ["hooks.example.org"]
    subscription = WebhookSubscriptionFactory(url="https://hooks.example.org/1")
    response = root_client.post(
        "/admin/jobtracking/webhooksubscription/",
        {"action": "rotate_secret", "_selected_action": [subscription.pk], "confirm": "yes"},
        follow=True,
    )
    subscription.refresh_from_db()
    assert subscription.secret_version == 2
    assert subscription_secret(subscription) in response.content.decode()
    page = root_client.get(f"/admin/jobtracking/webhooksubscription/{subscription.pk}/change/")
    assert subscription_secret(subscription) not in page.content.decode()


def readable(cookie: str) -> str:
    """What anyone holding a signed cookie reads without the secret key: signed is not
    encrypted (`django.core.signing`: optionally compressed base64, then the signature)."""
    data = signing.b64_decode(cookie.rsplit(":", 1)[0].lstrip(".").encode())
    with contextlib.suppress(zlib.error):
        data = zlib.decompress(data)
    return data.decode()


def test_a_new_subscriptions_secret_never_travels_in_a_cookie(root_client, settings):
    settings.OUTBOUND_ALLOWED_HOSTS = ["hooks.example.org"]
    response = root_client.post(
        "/admin/jobtracking/webhooksubscription/add/",
        {"url": "https://hooks.example.org/new", "event_types": ["job.succeeded"]},
    )
    assert response.status_code == 302
    secret = subscription_secret(WebhookSubscription.objects.get())
    messages = response.cookies.get("messages")
    assert messages is None or "whsec_" not in readable(messages.value)
    # Still shown, once, on the page the redirect leads to.
    assert secret in root_client.get(response.url).content.decode()
    assert secret not in root_client.get(response.url).content.decode()


def test_dead_deliveries_can_be_retried_from_the_admin(root_client):
    dead = WebhookDeliveryFactory(state="dead", attempts=8, next_attempt_at=None)
    root_client.post(
        "/admin/jobtracking/webhookdelivery/",
        {"action": "retry_dead", "_selected_action": [dead.pk]},
    )
    assert WebhookDelivery.objects.get(pk=dead.pk).state == "pending"


def test_dashboard_renders_every_section(root_client, fleet, django_assert_max_num_queries):
    with django_assert_max_num_queries(20):
        response = root_client.get("/admin/dashboard/")
    html = response.content.decode()
    assert response.status_code == 200
    for section in (
        "Jobs by status",
        'id="throughput"',
        'id="failures"',
        'id="in-flight"',
        'id="oldest"',
    ):
        assert section in html
    assert "extraction_failed" in html and str(fleet["pending"].pk) in html
    assert "cdn" not in html.lower()


def test_dashboard_needs_the_jobs_view_permission(client):
    ExtractionJobFactory(processing=True)
    client.force_login(staff("view_extractor"))
    assert client.get("/admin/dashboard/").status_code == 403
    client.force_login(staff("view_extractionjob"))
    assert client.get("/admin/dashboard/").status_code == 403  # it shows every client's jobs
    client.force_login(staff("view_extractionjob", "view_all_extractionjobs"))
    assert client.get("/admin/dashboard/").status_code == 200


def test_dashboard_needs_staff(client):
    client.force_login(UserFactory(username="plain"))
    assert client.get("/admin/dashboard/").status_code == 302


@pytest.mark.parametrize(
    "page",
    [
        "/admin/",
        "/admin/jobtracking/jobstatus/",
        "/admin/jobtracking/extractionresult/",
        "/admin/jobtracking/jobevent/",
        "/admin/jobtracking/webhooksubscription/",
        "/admin/jobtracking/webhookdelivery/",
        "/admin/extraction/extractor/",
    ],
)
def test_every_admin_page_renders(root_client, fleet, page):
    assert root_client.get(page).status_code == 200


def test_staff_see_and_export_only_their_own_jobs_without_view_all(client):
    member = staff("view_extractionjob", "requeue_extractionjob")
    mine = ExtractionJobFactory(requested_by=member, failed=True)
    theirs = ExtractionJobFactory(requested_by=UserFactory(username="client-b"), failed=True)
    client.force_login(member)
    assert listed(client.get(JOBS)) == {str(mine.pk)}
    assert client.get(f"{JOBS}{theirs.pk}/change/").status_code == 302  # not found for them
    export = client.post(JOBS, {"action": "export_csv"})
    body = b"".join(export.streaming_content).decode()
    assert str(mine.pk) in body and str(theirs.pk) not in body


def test_admin_actions_on_another_clients_jobs_need_manage_all(client):
    viewer = staff("view_extractionjob", "view_all_extractionjobs", "requeue_extractionjob")
    theirs = ExtractionJobFactory(requested_by=UserFactory(username="client-c"), failed=True)
    client.force_login(viewer)
    assert listed(client.get(JOBS)) == {str(theirs.pk)}  # view-all: may see it
    client.post(JOBS, {"action": "requeue_selected", "_selected_action": [theirs.pk]})
    theirs.refresh_from_db()
    assert theirs.status_id == "failed"
    viewer.user_permissions.add(Permission.objects.get(codename="manage_all_extractionjobs"))
    client.force_login(viewer)
    client.post(
        JOBS, {"action": "requeue_selected", "_selected_action": [theirs.pk], "reason": "r"}
    )
    theirs.refresh_from_db()
    assert theirs.status_id == "pending"
