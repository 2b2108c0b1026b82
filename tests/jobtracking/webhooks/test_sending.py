"""Webhooks to a local receiver that verifies signatures with the `standardwebhooks` package."""

import errno
import json
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from importlib.metadata import version

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from standardwebhooks import Webhook
from werkzeug import Response

from extraction.http1 import BadAnswer, Disconnected
from jobtracking.engine.delivery_lane import deliveries_send_due
from jobtracking.models import DeliveryAttempt, JobEvent, WebhookDelivery, WebhookSubscription
from jobtracking.services import Actor, NewJob, job_cancel, job_create
from jobtracking.services.deliveries import deliver, deliveries_claim_due, delivery_retry
from jobtracking.services.subscriptions import subscription_rotate_secret
from jobtracking.webhooks.sending import (
    RETRY_SCHEDULE,
    TEST_FAILED,
    SubscriptionTestRunningError,
    describe_failure,
    send_test_event,
    subscription_secret,
    subscription_secrets,
    wants,
)
from jobtracking.webhooks.transport import ConnectError, ConnectTimeout
from tests.factories import ExtractorFactory, UserFactory, WebhookSubscriptionFactory
from tests.jobtracking.api.conftest import assert_problem, client_for, service_account
from tests.names import resolve_as
from tests.processes import wait_until
from tests.receivers import KeepAliveReceiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback_receivers(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.WEBHOOK_READ_TIMEOUT = 0.5


@pytest.fixture
def subscription(httpserver):
    return WebhookSubscriptionFactory(url=httpserver.url_for("/hooks"))


def make_job(file_id="f-1"):
    return job_create(
        NewJob(
            extractor=ExtractorFactory(),
            file_id=file_id,
            source_url="https://files.example.org/a.pdf",
        ),
        actor=Actor("api"),
    )


def _verify_failure(message: str) -> ssl.SSLCertVerificationError:
    failure = ssl.SSLCertVerificationError(1, "certificate verify failed")
    failure.verify_message = message
    return failure


def _caused(failure: Exception, cause: Exception) -> Exception:
    failure.__cause__ = cause
    return failure


def lane_round() -> int:
    return deliveries_send_due(limit=100, lease=timedelta(seconds=30))


def test_event_is_delivered_signed_and_verifiable(subscription, httpserver):
    received = []

    def receiver(request):
        verified = Webhook(subscription_secret(subscription)).verify(
            request.get_data(), dict(request.headers)
        )
        received.append(verified)
        return Response("thanks", 200)

    httpserver.expect_request("/hooks", method="POST").respond_with_handler(receiver)
    job = make_job()
    assert lane_round() == 1

    assert len(received) == 1
    assert received[0]["type"] == "job.created"
    assert received[0]["data"]["id"] == str(job.pk)
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("delivered", 1, 200)
    assert delivery.delivered_at is not None and delivery.last_response_excerpt == "thanks"


def test_a_tampered_body_fails_verification(subscription, httpserver):
    captured = {}

    def receiver(request):
        captured["body"], captured["headers"] = request.get_data(), dict(request.headers)
        return Response("", 204)

    httpserver.expect_request("/hooks").respond_with_handler(receiver)
    make_job()
    deliver(WebhookDelivery.objects.get().pk)
    tampered = captured["body"].replace(b"job.created", b"job.succeeded")
    with pytest.raises(Exception, match=r"(?i)signature"):
        Webhook(subscription_secret(subscription)).verify(tampered, captured["headers"])


def signed_headers(subscription, httpserver) -> tuple[bytes, dict]:
    """The body and headers of one delivery of a new job's event to `subscription`."""
    captured = {}

    def receiver(request):
        captured["body"], captured["headers"] = request.get_data(), dict(request.headers)
        return Response("", 204)

    httpserver.expect_oneshot_request("/hooks").respond_with_handler(receiver)
    make_job(f"f-{WebhookDelivery.objects.count()}")
    deliver(WebhookDelivery.objects.latest("pk").pk)
    return captured["body"], captured["headers"]


def test_a_rotated_secret_signs_beside_the_new_one_for_the_grace_period(
    subscription, httpserver, settings
):
    settings.WEBHOOK_SECRET_GRACE_HOURS = 24
    old = subscription_secret(subscription)
    subscription_rotate_secret(subscription)
    new = subscription_secret(subscription)
    assert subscription_secrets(subscription) == [new, old]

    body, headers = signed_headers(subscription, httpserver)
    assert len(headers["Webhook-Signature"].split(" ")) == 2
    for secret in (new, old):  # a receiver still on the old secret, or already on the new
        assert Webhook(secret).verify(body, headers)["type"] == "job.created"

    # Once the grace period is over, only the new one signs.
    later = subscription.secret_rotated_at + timedelta(hours=24, seconds=1)
    assert subscription_secrets(subscription, later) == [new]
    WebhookSubscription.objects.filter(pk=subscription.pk).update(
        secret_rotated_at=timezone.now() - timedelta(hours=25)
    )
    subscription.refresh_from_db()
    body, headers = signed_headers(subscription, httpserver)
    assert Webhook(new).verify(body, headers)["type"] == "job.created"
    with pytest.raises(Exception, match=r"(?i)signature"):
        Webhook(old).verify(body, headers)


def test_a_subscription_never_rotated_signs_with_one_secret(subscription):
    assert subscription_secrets(subscription) == [subscription_secret(subscription)]


def test_subscriptions_receive_only_their_event_types(httpserver):
    WebhookSubscriptionFactory(url=httpserver.url_for("/hooks"), event_types=["job.cancelled"])
    httpserver.expect_request("/hooks").respond_with_data("ok")
    job = make_job()
    job_cancel(job_id=job.pk, actor=Actor("api"))
    assert lane_round() == 1
    (delivery,) = WebhookDelivery.objects.all()
    assert delivery.event.type == "job.cancelled" and delivery.state == "delivered"


def test_inactive_subscriptions_receive_nothing(httpserver):
    WebhookSubscriptionFactory(url=httpserver.url_for("/hooks"), active=False)
    make_job()
    assert not WebhookDelivery.objects.exists()


def test_failure_then_success_records_the_retry(subscription, httpserver):
    httpserver.expect_oneshot_request("/hooks").respond_with_data("boom", status=500)
    httpserver.expect_oneshot_request("/hooks").respond_with_data("ok", status=200)
    make_job()
    delivery = WebhookDelivery.objects.get()

    assert deliver(delivery.pk) == "pending"
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.last_status_code, delivery.last_error) == (
        1,
        500,
        f"HTTP 500 from localhost:{httpserver.port}",
    )
    assert delivery.last_response_excerpt == "boom"
    wait = (delivery.next_attempt_at - timezone.now()).total_seconds()
    assert 4 <= wait <= 6.1

    assert deliver(delivery.pk) == "delivered"
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("delivered", 2, 200)
    # Each attempt kept as it went, oldest first.
    log = list(delivery.attempt_log.all())
    assert [(a.status_code, a.response_excerpt, a.error) for a in log] == [
        (500, "boom", f"HTTP 500 from localhost:{httpserver.port}"),
        (200, "ok", ""),
    ]
    assert log[0].attempted_at < log[1].attempted_at and all(a.duration_ms >= 0 for a in log)


def test_permanent_failure_ends_dead_and_can_be_retried(subscription, httpserver):
    httpserver.expect_request("/hooks").respond_with_data("down", status=503)
    make_job()
    delivery = WebhookDelivery.objects.get()
    waits = []
    for _ in range(len(RETRY_SCHEDULE) + 1):
        state = deliver(delivery.pk)
        delivery.refresh_from_db()
        if delivery.next_attempt_at:
            waits.append((delivery.next_attempt_at - timezone.now()).total_seconds())
    assert state == "dead" and delivery.attempts == len(RETRY_SCHEDULE) + 1
    assert delivery.next_attempt_at is None
    # The schedule grows to a day: about 31 hours of retries in all.
    assert waits[0] < 7 and 24 * 3600 <= waits[-1] <= 29 * 3600

    httpserver.clear()
    httpserver.expect_request("/hooks").respond_with_data("ok")
    assert delivery_retry(queryset=WebhookDelivery.objects.all()) == 1
    assert deliver(delivery.pk) == "delivered"


def test_a_slow_receiver_times_out_and_is_retried(subscription, httpserver):
    def slow(request):
        time.sleep(1.0)
        return Response("late")

    httpserver.expect_request("/hooks").respond_with_handler(slow)
    make_job()
    assert deliver(WebhookDelivery.objects.get().pk) == "pending"
    expected = f"ReadTimeout: localhost:{httpserver.port} did not answer in 0.5 s"
    assert WebhookDelivery.objects.get().last_error == expected
    attempt = DeliveryAttempt.objects.get()
    assert (attempt.status_code, attempt.error) == (None, expected)
    assert attempt.duration_ms >= 500


def test_redirects_are_not_followed(subscription, httpserver):
    httpserver.expect_request("/hooks").respond_with_data(
        "", status=302, headers={"Location": "http://169.254.169.254/"}
    )
    make_job()
    assert deliver(WebhookDelivery.objects.get().pk) == "pending"
    assert WebhookDelivery.objects.get().last_status_code == 302


def test_a_delivery_to_a_now_private_address_is_refused_at_send_time(httpserver, settings):
    WebhookSubscriptionFactory(url=httpserver.url_for("/hooks"))
    make_job()
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    assert deliver(WebhookDelivery.objects.get().pk) == "pending"
    assert "non-public" in WebhookDelivery.objects.get().last_error
    assert httpserver.log == []


def test_dns_rebinding_cannot_turn_a_delivery_towards_loopback(httpserver, settings, monkeypatch):
    """The attack: the name answers a public address to the guard, then loopback to the
    connection. The delivery goes to the address the guard approved, or nowhere."""
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    settings.WEBHOOK_CONNECT_TIMEOUT = 0.5
    httpserver.expect_request("/hooks").respond_with_data("captured")
    resolve_as(monkeypatch, "rebind.example", "93.184.216.34", "127.0.0.1")
    subscription = WebhookSubscriptionFactory(url="https://hooks.example.org/hooks")
    # Saved while the name looked public; the receiver is really this loopback server.
    WebhookSubscription.objects.filter(pk=subscription.pk).update(
        url=f"http://rebind.example:{httpserver.port}/hooks"
    )
    make_job()
    assert deliver(WebhookDelivery.objects.get().pk) == "pending"
    assert httpserver.log == []  # nothing reached loopback
    assert WebhookDelivery.objects.get().last_status_code is None


def test_a_pinned_delivery_keeps_the_name_in_the_host_header(httpserver, settings, monkeypatch):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    httpserver.expect_request("/hooks").respond_with_data("ok")
    resolve_as(monkeypatch, "named.example", "127.0.0.1")
    subscription = WebhookSubscriptionFactory(url="https://hooks.example.org/hooks")
    WebhookSubscription.objects.filter(pk=subscription.pk).update(
        url=f"http://named.example:{httpserver.port}/hooks"
    )
    make_job()
    assert deliver(WebhookDelivery.objects.get().pk) == "delivered"
    (request, _) = httpserver.log[0]
    assert request.headers["Host"] == f"named.example:{httpserver.port}"


def test_the_lane_claims_due_deliveries_once(subscription):
    make_job()
    first, _ = deliveries_claim_due(limit=10, lease=timedelta(seconds=30))
    second, _ = deliveries_claim_due(limit=10, lease=timedelta(seconds=30))
    assert len(first) == 1 and second == []
    assert WebhookDelivery.objects.get().claimed_until > timezone.now() + timedelta(seconds=29)
    # Its sender died: it is due again when the lease ends.
    WebhookDelivery.objects.update(claimed_until=timezone.now())
    assert [d.pk for d in deliveries_claim_due(limit=10, lease=timedelta(seconds=30))[0]] == [
        first[0].pk
    ]


def _delivery_updates(cursor) -> tuple[int, int]:
    cursor.execute(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = %s",
        [WebhookDelivery._meta.db_table],
    )
    return cursor.fetchone()


def test_a_claim_adds_no_index_entry(subscription):
    """The claim, one write per delivery beside the engine's, is a heap-only update: it sets no
    indexed column (and the table keeps room in its pages for the new version)."""
    make_job()
    with connection.cursor() as cursor:
        before = _delivery_updates(cursor)
        (claimed,), _ = deliveries_claim_due(limit=10, lease=timedelta(seconds=30))
        after = _delivery_updates(cursor)
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)  # updated once, heap-only
    assert WebhookDelivery.objects.get().next_attempt_at == claimed.next_attempt_at


def test_a_claim_takes_the_oldest_due_with_their_events_and_receivers(
    subscription, django_assert_num_queries
):
    job, now = make_job(), timezone.now()
    events = JobEvent.objects.bulk_create(
        JobEvent(job=job, type="job.created", payload={"n": n}) for n in range(5)
    )
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            event=event, subscription=subscription, next_attempt_at=now - timedelta(seconds=n)
        )
        for n, event in enumerate(events)
    )
    oldest = WebhookDelivery.objects.order_by("next_attempt_at").values_list("pk", flat=True)

    claimed, _ = deliveries_claim_due(limit=3, lease=timedelta(seconds=30))

    with django_assert_num_queries(0):  # what the lane sends is loaded with the claim
        assert [d.subscription for d in claimed] == [subscription] * 3
        assert [d.event.payload for d in claimed] == [{"n": 4}, {"n": 3}, {"n": 2}]

    assert [delivery.pk for delivery in claimed] == list(oldest[:3])


def test_subscription_secrets_are_derived_and_rotate(subscription):
    secret = subscription_secret(subscription)
    assert secret.startswith("whsec_") and secret == subscription_secret(subscription)
    subscription.secret_version += 1
    assert subscription_secret(subscription) != secret


def test_subscription_validation_refuses_private_urls_and_unknown_types(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    with pytest.raises(ValidationError, match="non-public"):
        WebhookSubscriptionFactory.build(url="http://10.1.1.1/h").full_clean()
    with pytest.raises(ValidationError, match="Unknown event types"):
        WebhookSubscriptionFactory.build(
            url="https://93.184.216.34/h", event_types=["job.exploded"]
        ).full_clean()


def test_a_subscription_names_its_event_types_or_chooses_all_of_them_not_both(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    url = "https://93.184.216.34/h"
    for neither_or_both in (
        WebhookSubscription(url=url),
        WebhookSubscription(url=url, event_types=[], all_event_types=False),
        WebhookSubscription(url=url, event_types=["job.failed"], all_event_types=True),
    ):
        with pytest.raises(ValidationError, match="all_event_types") as refused:
            neither_or_both.full_clean()
        assert list(refused.value.message_dict) == ["event_types"]
    WebhookSubscription(url=url, event_types=["job.failed"]).full_clean()
    WebhookSubscription(url=url, all_event_types=True).full_clean()


def test_the_database_refuses_a_subscription_without_event_types():
    # A subscription written around `full_clean` (a shell, a script) is refused, not saved
    # receiving nothing, or everything.
    for neither_or_both in ({}, {"event_types": ["job.failed"], "all_event_types": True}):
        refused = pytest.raises(IntegrityError, match="subscription_all_or_listed_event_types")
        with refused, transaction.atomic():
            WebhookSubscription.objects.create(url="https://hooks.example.org/x", **neither_or_both)


def test_wants_a_type_added_later_only_when_every_type_was_chosen():
    # `job.progressed` stands for a type added after the subscriptions were saved.
    listed = WebhookSubscription(event_types=["job.succeeded", "job.failed"])
    every = WebhookSubscription(all_event_types=True)
    empty = WebhookSubscription(event_types=[])  # refused at every save; it would mean none
    assert "job.progressed" not in listed.event_types
    assert [wants(s, "job.progressed", None, True) for s in (listed, every, empty)] == [
        False,
        True,
        False,
    ]
    assert [wants(s, "job.failed", None, True) for s in (listed, every, empty)] == [
        True,
        True,
        False,
    ]


def test_delivery_body_is_the_event_as_json(subscription, httpserver):
    httpserver.expect_request("/hooks").respond_with_data("ok")
    job = make_job()
    deliver(WebhookDelivery.objects.get().pk)
    request, _ = httpserver.log[0]
    body = json.loads(request.get_data())
    event = WebhookDelivery.objects.get().event
    assert body["type"] == "job.created" and body["data"]["file_id"] == job.file_id
    # `data` is the event's payload, the job as the API shows it; moments end in "Z" there too.
    assert body["data"] == event.payload and body["data"]["links"]["self"].startswith("/api/v1/")
    assert body["timestamp"] == event.created_at.isoformat().replace("+00:00", "Z")
    assert request.headers["webhook-id"] == str(event.event_id)


def test_log_lines_carry_the_context_they_are_written_in():
    import logging

    from jobtracking.infra.logs import JobContextFilter, JsonFormatter, log_context

    record = logging.LogRecord("t", logging.INFO, __file__, 1, "hello %s", ("x",), None)
    with log_context(event="webhook_delivery"):
        JobContextFilter().filter(record)
    assert record.job_prefix == "[webhook_delivery] "
    assert json.loads(JsonFormatter().format(record)) | {"time": None} == {
        "time": None,
        "level": "INFO",
        "logger": "t",
        "message": "hello x",
        "event": "webhook_delivery",
    }


def test_a_subscription_receives_only_the_events_of_jobs_its_owner_may_see():
    """The same rule for the creation statement (`test_creation_statement`) and transitions."""
    owner, other = UserFactory(), UserFactory(is_superuser=True)  # other may see every job
    own = WebhookSubscriptionFactory(created_by=owner)
    everything = WebhookSubscriptionFactory(created_by=other, all_jobs=True)
    job = job_create(
        NewJob(
            extractor=ExtractorFactory(),
            file_id="scoped",
            source_url="https://files.example.org/a.pdf",
        ),
        actor=Actor("api", owner),
    )
    job_cancel(job_id=job.pk, actor=Actor("api", owner))
    foreign = job_create(
        NewJob(
            extractor=ExtractorFactory(),
            file_id="foreign",
            source_url="https://files.example.org/a.pdf",
        ),
        actor=Actor("api", other),
    )
    job_cancel(job_id=foreign.pk, actor=Actor("api", other))
    received = set(WebhookDelivery.objects.values_list("subscription", "event__job", "event__type"))
    assert received == {
        (own.pk, job.pk, "job.created"),
        (own.pk, job.pk, "job.cancelled"),
        (everything.pk, job.pk, "job.created"),
        (everything.pk, job.pk, "job.cancelled"),
        (everything.pk, foreign.pk, "job.created"),
        (everything.pk, foreign.pk, "job.cancelled"),
    }


def test_staff_without_view_all_manage_only_their_own_subscriptions(client):
    from tests.jobtracking.admin.conftest import staff

    user = staff("view_webhooksubscription", "change_webhooksubscription")
    mine = WebhookSubscriptionFactory(created_by=user)
    theirs = WebhookSubscriptionFactory(all_jobs=True)
    client.force_login(user)
    page = client.get("/admin/jobtracking/webhooksubscription/").content.decode()
    assert f"/{mine.pk}/change/" in page and f"/{theirs.pk}/change/" not in page
    assert (
        client.get(f"/admin/jobtracking/webhooksubscription/{theirs.pk}/change/").status_code == 302
    )
    form = client.get(f"/admin/jobtracking/webhooksubscription/{mine.pk}/change/").content.decode()
    assert 'name="all_jobs"' not in form  # read-only: they cannot widen it


def test_a_long_answer_is_kept_as_an_excerpt_and_its_connection_dropped(subscription, httpserver):
    httpserver.expect_request("/hooks").respond_with_data("x" * 200_000)
    make_job()
    deliver(WebhookDelivery.objects.get().pk)
    delivery = WebhookDelivery.objects.get()
    assert delivery.state == "delivered" and delivery.last_response_excerpt == "x" * 1024


def test_a_delivery_says_who_sends_it_in_its_user_agent(subscription, httpserver):
    httpserver.expect_request("/hooks").respond_with_data("ok")
    make_job()
    deliver(WebhookDelivery.objects.get().pk)
    request, _ = httpserver.log[0]
    agent = request.headers["User-Agent"]
    assert agent == f"fluxx-extraction-jobs/{version('extraction-job-tracking')}"
    assert "python" not in agent.lower() and "urllib3" not in agent


def test_a_refused_connection_names_its_cause_and_host_but_not_the_query(settings):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    WebhookSubscriptionFactory(url=f"http://127.0.0.1:{port}/hooks?token=s3cret")
    make_job()
    assert deliver(WebhookDelivery.objects.get().pk) == "pending"
    error = DeliveryAttempt.objects.get().error
    assert error == f"ConnectionRefused: 127.0.0.1:{port} refused the connection"
    assert "s3cret" not in WebhookDelivery.objects.get().last_error


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (
            _caused(ConnectTimeout(), TimeoutError("timed out connecting to 10.0.0.7")),
            "ConnectTimeout: hooks.example:443 did not accept a connection in 5 s",
        ),
        (
            _caused(ConnectError(), OSError(errno.EHOSTUNREACH, "No route to host")),
            "ConnectionFailed: hooks.example:443: No route to host",
        ),
        (
            _caused(ConnectError(), socket.gaierror(socket.EAI_NONAME, "not known")),
            "NameResolution: hooks.example cannot be resolved",
        ),
        (
            TimeoutError("timed out reading from 10.0.0.7"),
            "ReadTimeout: hooks.example:443 did not answer in 10 s",
        ),
        (
            _verify_failure("self-signed certificate in certificate chain"),
            "TLSError: hooks.example:443: certificate not trusted "
            "(self-signed certificate in certificate chain)",
        ),
        (
            ConnectionResetError(104, "Connection reset by peer"),
            "ConnectionClosed: hooks.example:443 closed the connection (ConnectionResetError)",
        ),
        (
            Disconnected(),
            "ConnectionClosed: hooks.example:443 closed the connection (Disconnected)",
        ),
        (
            BadAnswer("HTTP/9 10.0.0.7 /hooks?token=s3cret"),
            "BadAnswer: hooks.example:443 did not answer in HTTP/1.1",
        ),
    ],
)
def test_a_failure_is_described_by_its_cause_and_host_alone(settings, failure, said):
    settings.WEBHOOK_CONNECT_TIMEOUT, settings.WEBHOOK_READ_TIMEOUT = 5, 10
    described = describe_failure(failure, "https://hooks.example/hooks?token=s3cret")
    assert described == said
    assert "s3cret" not in described and "10.0.0.7" not in described


class _NotHTTP(KeepAliveReceiver):
    def answer(self) -> bytes | None:
        return b"SSH-2.0-OpenSSH_9.6\r\n\r\n"


@pytest.fixture
def test_receiver(request, httpserver):
    """A receiver that fails the test event in its own way: its URL, and the status if any."""
    kind = request.param
    if kind == "HTTP 503":
        httpserver.expect_request("/hooks").respond_with_data("down", status=503)
        yield httpserver.url_for("/hooks"), 503
    elif kind == "not HTTP":
        with _NotHTTP() as server:
            yield f"http://127.0.0.1:{server.port}/hooks", None
    else:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            if kind == "silent":
                listener.listen(8)  # the kernel accepts; nobody answers
            yield f"http://127.0.0.1:{listener.getsockname()[1]}/hooks", None  # else refused


@pytest.mark.parametrize(
    "test_receiver", ["refused", "silent", "not HTTP", "HTTP 503"], indirect=True
)
def test_a_failed_test_event_says_one_phrase_whatever_the_cause_within_its_timeout(
    settings, test_receiver
):
    """A test event must not tell a refused port from a silent one or one that is not HTTP
    (a port scanner for the client), nor hold a web worker for the lane's timeouts."""
    settings.WEBHOOK_CONNECT_TIMEOUT, settings.WEBHOOK_READ_TIMEOUT = 5, 10
    settings.WEBHOOK_TEST_TIMEOUT = 0.5
    url, status = test_receiver
    started = time.monotonic()
    outcome = send_test_event(WebhookSubscriptionFactory(url=url))
    assert time.monotonic() - started < 1.5
    assert (outcome.status, outcome.error) == (
        status,
        TEST_FAILED + (f" (HTTP {status})" if status else ""),
    )


class _HoldsTheFirst(KeepAliveReceiver):
    """Answers 204, the first POST only once `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        super().__init__()

    def answer(self) -> bytes | None:
        if len(self.heads) == 1:
            self.release.wait(10)
        return super().answer()


def _sent_in_a_thread(subscription):
    try:
        return send_test_event(subscription)
    finally:
        connection.close()  # the thread's own


@pytest.mark.django_db(transaction=True)
def test_one_test_event_at_a_time_per_subscription(client):
    owner = service_account("tester", "view_webhooksubscription", "change_webhooksubscription")
    with _HoldsTheFirst() as receiver, ThreadPoolExecutor(1) as thread:
        url = f"http://127.0.0.1:{receiver.port}/hooks"
        subscription = WebhookSubscriptionFactory(url=url, created_by=owner)
        other = WebhookSubscriptionFactory(url=url, created_by=owner)
        first = thread.submit(_sent_in_a_thread, subscription)
        wait_until(lambda: receiver.heads, 5, "the first test's POST")

        with pytest.raises(SubscriptionTestRunningError):
            send_test_event(subscription)
        answer = client_for(owner).post(f"/api/v1/webhook_endpoints/{subscription.pk}/test/")
        assert_problem(answer, 429, "throttled")
        assert int(answer["Retry-After"]) > 0
        client.force_login(UserFactory(is_staff=True, is_superuser=True))
        page = client.post(
            f"/admin/jobtracking/webhooksubscription/{subscription.pk}/send-test/", follow=True
        )
        assert "already on its way" in page.content.decode()
        assert send_test_event(other).status == 204  # another endpoint is not held back

        receiver.release.set()
        assert first.result(timeout=10).status == 204
        assert send_test_event(subscription).status == 204  # and once it is done, again
    assert len(receiver.heads) == 3  # the refused ones sent nothing
