"""The delivery lane: deliveries sent in rounds outside the job broker, and a receiver that is
down or never answers gets probes, not one POST per event; its deliveries wait, uncounted, and
still die a day or so after their first failure."""

import json
import logging
import os
import socket
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import REGISTRY
from standardwebhooks import Webhook
from werkzeug import Response

from jobtracking.engine import delivery_lane
from jobtracking.engine.delivery_lane import DeliveryLane, deliveries_send_due
from jobtracking.infra import metrics
from jobtracking.models import (
    CircuitState,
    DeliveryAttempt,
    JobEvent,
    ReceiverHealth,
    WebhookDelivery,
)
from jobtracking.services import deliveries
from jobtracking.services.deliveries import deliveries_record, record_attempt
from jobtracking.webhooks.sending import RETRY_WINDOW, Outcome, subscription_secret
from tests.factories import WebhookSubscriptionFactory
from tests.jobtracking.webhooks.test_sending import lane_round, make_job
from tests.receivers import KeepAliveReceiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback_receivers(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.WEBHOOK_READ_TIMEOUT = 0.3
    settings.CIRCUIT_FAILURES = 5


@pytest.fixture
def receiver(httpserver):
    return WebhookSubscriptionFactory(url=httpserver.url_for("/hooks"))


def six_events() -> None:
    for n in range(6):
        make_job(file_id=f"f-{n}")


def health(subscription) -> ReceiverHealth:
    return ReceiverHealth.objects.get(pk=subscription.pk)


def probe_due(subscription) -> None:
    ReceiverHealth.objects.filter(pk=subscription.pk).update(probe_at=timezone.now())


@pytest.fixture
def silent_receiver():
    """A receiver that accepts connections (the kernel completes them) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield WebhookSubscriptionFactory(url=f"http://127.0.0.1:{listener.getsockname()[1]}/h")


@pytest.mark.parametrize("answer", ["503", "no answer"])
def test_a_receiver_down_opens_its_circuit_and_costs_no_attempt(request, httpserver, answer):
    if answer == "503":
        receiver = request.getfixturevalue("receiver")
        httpserver.expect_request("/hooks").respond_with_data("down", status=503)
    else:
        receiver = request.getfixturevalue("silent_receiver")
    six_events()
    assert lane_round() == 6
    circuit = health(receiver)
    host = receiver.url.split("/")[2]
    assert circuit.last_error == (
        f"HTTP 503 from {host}"
        if answer == "503"
        else f"ReadTimeout: {host} did not answer in 0.3 s"
    )
    assert circuit.state == CircuitState.OPEN
    for delivery in WebhookDelivery.objects.all():
        assert (delivery.state, delivery.attempts) == ("pending", 0)
        assert delivery.next_attempt_at == circuit.probe_at
        assert delivery.first_failed_at is not None and delivery.last_error


def test_an_open_receiver_gets_one_probe_then_its_deliveries_flow(receiver, httpserver):
    posts = []

    def down(request):
        posts.append(request)
        return Response("down", status=503)

    httpserver.expect_request("/hooks").respond_with_handler(down)
    six_events()
    lane_round()
    assert lane_round() == 0  # not yet time for a probe
    assert len(posts) == 6
    probe_due(receiver)
    WebhookDelivery.objects.update(next_attempt_at=timezone.now())
    assert lane_round() == 1
    assert len(posts) == 7
    assert health(receiver).probes == 1

    httpserver.clear()
    httpserver.expect_request("/hooks").respond_with_data("ok")
    probe_due(receiver)
    WebhookDelivery.objects.update(next_attempt_at=health(receiver).probe_at)
    assert lane_round() == 1  # the probe succeeds: the circuit closes, the rest are released
    assert health(receiver).state == CircuitState.CLOSED
    assert lane_round() == 5
    assert set(WebhookDelivery.objects.values_list("state", "attempts")) == {("delivered", 1)}
    # Every POST logged, the six that met the outage and the probe too, though uncounted.
    log = DeliveryAttempt.objects.order_by("attempted_at", "id")
    assert [a.status_code for a in log] == [503] * 7 + [200] * 6


def test_one_delivery_failing_alone_follows_its_schedule(receiver, httpserver):
    httpserver.expect_request("/hooks").respond_with_data("down", status=503)
    make_job()
    for _ in range(6):
        WebhookDelivery.objects.update(next_attempt_at=timezone.now())
        lane_round()
    assert WebhookDelivery.objects.get().attempts == 6
    assert health(receiver).state == CircuitState.CLOSED


def test_a_held_delivery_dies_a_retry_window_after_its_first_failure(receiver, httpserver):
    httpserver.expect_request("/hooks").respond_with_data("down", status=503)
    six_events()
    lane_round()
    WebhookDelivery.objects.update(first_failed_at=timezone.now() - RETRY_WINDOW)
    probe_due(receiver)
    WebhookDelivery.objects.update(next_attempt_at=timezone.now())
    lane_round()
    assert WebhookDelivery.objects.filter(state="dead").count() == 1  # the probe, still failing


def test_a_healthy_receiver_beside_a_down_one_gets_everything(receiver, httpserver):
    httpserver.expect_request("/hooks").respond_with_data("down", status=503)
    httpserver.expect_request("/ok").respond_with_data("ok")
    healthy = WebhookSubscriptionFactory(url=httpserver.url_for("/ok"))
    six_events()
    assert deliveries_send_due(limit=100, lease=timedelta(seconds=30)) == 12
    assert WebhookDelivery.objects.filter(subscription=healthy, state="delivered").count() == 6
    assert not ReceiverHealth.objects.filter(pk=healthy.pk).exists()  # healthy: no write


class _SlowReceiver(KeepAliveReceiver):
    """Holds each POST until `together` are in at once (or for half a second), then answers
    204; `most` is the most it held at once."""

    def __init__(self, together: int) -> None:
        self.together, self.held, self.most = together, 0, 0
        self.change = threading.Condition()
        super().__init__()

    def answer(self) -> bytes | None:
        with self.change:
            self.held += 1
            self.most = max(self.most, self.held)
            self.change.notify_all()
            self.change.wait_for(lambda: self.held >= self.together, timeout=0.5)
            self.held -= 1
        return super().answer()


@pytest.mark.parametrize(("concurrency", "most"), [(16, 6), (2, 2)])
def test_a_slow_receivers_deliveries_go_at_once_up_to_the_concurrency(settings, concurrency, most):
    settings.WEBHOOK_CONCURRENCY, settings.WEBHOOK_READ_TIMEOUT = concurrency, 5
    with _SlowReceiver(together=6) as slow:
        WebhookSubscriptionFactory(url=f"http://127.0.0.1:{slow.port}/hooks")
        six_events()
        assert lane_round() == 6
    assert WebhookDelivery.objects.filter(state="delivered").count() == 6
    assert slow.most == most


class _SteadyReceiver(KeepAliveReceiver):
    """Answers each POST after 10 ms: a receiver that keeps up, one POST after another."""

    def answer(self) -> bytes | None:
        time.sleep(0.01)
        return super().answer()


def test_a_receiver_that_keeps_up_is_served_by_one_sender(settings, monkeypatch):
    # Thirty POSTs of 10 ms: a sender added every interval regardless would make four or five.
    monkeypatch.setattr(delivery_lane, "SENDER_RAMP_SECONDS", 0.03)
    with _SteadyReceiver() as steady:
        WebhookSubscriptionFactory(url=f"http://127.0.0.1:{steady.port}/hooks")
        for n in range(30):
            make_job(file_id=f"f-{n}")
        assert lane_round() == 30
    assert WebhookDelivery.objects.filter(state="delivered").count() == 30
    assert len(steady.connections) <= 2  # two if a stall held one sender past the interval


def test_a_rounds_outcomes_are_recorded_as_one_at_a_time_with_the_compare_and_set(receiver):
    six_events()
    one, two, three, stale = WebhookDelivery.objects.order_by("pk")[:4]
    held = timezone.now() + timedelta(minutes=5)
    WebhookDelivery.objects.filter(pk=stale.pk).update(attempts=1)  # another sender was first
    deliveries_record(
        [
            (one, (204, "", ""), None),
            (two, (500, "oops", ""), None),
            (three, (None, "", "ConnectionError"), held),
            (stale, (204, "", ""), None),
        ]
    )
    rows = WebhookDelivery.objects.in_bulk([one.pk, two.pk, three.pk, stale.pk])
    assert (rows[one.pk].state, rows[one.pk].attempts) == ("delivered", 1)
    assert rows[one.pk].delivered_at is not None and rows[one.pk].next_attempt_at is None
    assert (rows[two.pk].state, rows[two.pk].attempts, rows[two.pk].last_error) == (
        "pending",
        1,
        "HTTP 500",
    )
    assert rows[two.pk].last_response_excerpt == "oops" and rows[two.pk].first_failed_at
    # Held by the receiver's circuit: not counted, due when it may be called again.
    assert (rows[three.pk].attempts, rows[three.pk].next_attempt_at) == (0, held)
    assert rows[three.pk].last_error == "ConnectionError"
    assert (rows[stale.pk].state, rows[stale.pk].attempts) == ("pending", 1)
    # Each outcome logged as an attempt, the stale sender's too (the receiver got its POST).
    logged = {a.delivery_id: a for a in DeliveryAttempt.objects.all()}
    assert logged.keys() == {one.pk, two.pk, three.pk, stale.pk}
    assert (logged[two.pk].status_code, logged[two.pk].error) == (500, "HTTP 500")
    assert logged[two.pk].response_excerpt == "oops"
    assert (logged[three.pk].status_code, logged[three.pk].error) == (None, "ConnectionError")
    # The same outcome recorded alone leaves the same row.
    alone = WebhookDelivery.objects.get(pk=WebhookDelivery.objects.order_by("pk")[4].pk)
    record_attempt(alone, (204, "", ""))
    alone.refresh_from_db()
    assert (alone.state, alone.attempts, alone.last_error) == ("delivered", 1, "")
    assert alone.attempt_log.get().status_code == 204


@pytest.mark.django_db(transaction=True)
def test_a_rounds_outcomes_and_attempts_are_one_statement(seeded_statuses, receiver):
    # Outside any transaction, as in the lane: no savepoint either.
    six_events()
    deliveries = list(WebhookDelivery.objects.order_by("pk"))
    began = timezone.now() - timedelta(seconds=1)
    outcomes = [Outcome(204, "", "", began, 12 + n) for n in range(len(deliveries))]
    with CaptureQueriesContext(connection) as queries:
        deliveries_record([(d, o, None) for d, o in zip(deliveries, outcomes, strict=True)])
    assert len(queries) == 1
    rows = DeliveryAttempt.objects.order_by("delivery_id")
    assert [(a.delivery_id, a.duration_ms) for a in rows] == [
        (d.pk, 12 + n) for n, d in enumerate(deliveries)
    ]
    assert {a.attempted_at for a in rows} == {began}


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def among_good_receivers(httpserver, path: str):
    """A subscription to `path`, between two whose receivers answer 204."""
    httpserver.expect_request("/good").respond_with_data("", status=204)
    WebhookSubscriptionFactory(url=httpserver.url_for("/good?n=1"))
    odd = WebhookSubscriptionFactory(url=httpserver.url_for(path))
    WebhookSubscriptionFactory(url=httpserver.url_for("/good?n=2"))
    return odd


@pytest.mark.parametrize(
    ("answer", "recorded"),
    [
        (b"ok\x00bad", "ok\ufffdbad"),
        (b"ok\xffbad", "ok\ufffdbad"),  # not UTF-8
        (b"ok\xed\xa0\x80bad", "ok\ufffd\ufffd\ufffdbad"),  # a surrogate, encoded
    ],
    ids=["NUL", "not UTF-8", "surrogate"],
)
def test_an_unstorable_answer_is_recorded_made_safe_beside_its_neighbours(
    httpserver, answer, recorded
):
    httpserver.expect_request("/odd").respond_with_data(answer, status=200)
    odd = among_good_receivers(httpserver, "/odd")
    make_job()
    assert lane_round() == 3
    rows = {d.subscription_id: d for d in WebhookDelivery.objects.all()}
    assert {pk: rows[pk].state for pk in rows} == dict.fromkeys(rows, "delivered")
    assert rows[odd.pk].last_response_excerpt == recorded
    assert DeliveryAttempt.objects.get(delivery=rows[odd.pk]).response_excerpt == recorded
    assert DeliveryAttempt.objects.count() == 3


@pytest.fixture
def failing_round_record(monkeypatch):
    """The round's one recording statement fails, on the server, whatever it records."""
    failing = deliveries._recorded_statement() + " AND 1 / 0 = 1"
    monkeypatch.setattr(deliveries, "_recorded_statement", lambda: failing)


def test_a_rounds_failed_record_is_made_one_delivery_at_a_time(
    receiver, httpserver, failing_round_record
):
    httpserver.expect_request("/hooks").respond_with_data("", status=204)
    six_events()
    before = counted("jobtracking_webhook_delivery_errors_total", stage="record")
    assert lane_round() == 6
    assert set(WebhookDelivery.objects.values_list("state", "attempts")) == {("delivered", 1)}
    assert DeliveryAttempt.objects.filter(status_code=204).count() == 6
    assert counted("jobtracking_webhook_delivery_errors_total", stage="record") == before + 1


def test_a_delivery_whose_own_record_fails_is_ended_alone(
    receiver, httpserver, failing_round_record, monkeypatch
):
    httpserver.expect_request("/hooks").respond_with_data("", status=204)
    six_events()
    doomed = WebhookDelivery.objects.order_by("pk").first()
    real = deliveries.record_attempt

    def record_attempt_failing_for_one(delivery, *args):
        if delivery.pk == doomed.pk:
            raise ValueError("cannot be stored")
        return real(delivery, *args)

    monkeypatch.setattr(deliveries, "record_attempt", record_attempt_failing_for_one)
    assert lane_round() == 6
    doomed.refresh_from_db()
    assert (doomed.state, doomed.next_attempt_at, doomed.claimed_until) == ("dead", None, None)
    assert doomed.last_error.startswith("Unrecordable: ")
    others = WebhookDelivery.objects.exclude(pk=doomed.pk)
    assert set(others.values_list("state", flat=True)) == {"delivered"}
    assert lane_round() == 0  # it fails no other round


def test_an_event_orjson_refuses_is_delivered_made_safe_beside_its_neighbours(httpserver):
    received = []

    def receiver(request):
        received.append((int(request.args["n"]), request.get_data(), dict(request.headers)))
        return Response("", 204)

    httpserver.expect_request("/hooks").respond_with_handler(receiver)
    subscriptions = [
        WebhookSubscriptionFactory(url=httpserver.url_for(f"/hooks?n={n}")) for n in range(2)
    ]
    make_job(file_id="f-1")
    huge = JobEvent.objects.get()
    make_job(file_id="f-2")
    # Stored before the API refused such numbers (PostgreSQL's jsonb holds it as it is).
    JobEvent.objects.filter(pk=huge.pk).update(payload={**huge.payload, "metadata": {"n": 2**64}})
    assert lane_round() == 4
    assert set(WebhookDelivery.objects.values_list("state", flat=True)) == {"delivered"}
    metadata = []
    for n, body, headers in received:
        Webhook(subscription_secret(subscriptions[n])).verify(body, headers)
        metadata.append((n, json.loads(body)["data"]["metadata"]))
    # The number as its decimal text; its neighbour as it was.
    assert sorted(metadata, key=str) == sorted(
        [(n, {"n": str(2**64)}) for n in range(2)] + [(n, {}) for n in range(2)], key=str
    )


@pytest.mark.parametrize("where", ["send", "Receiver"])
def test_a_delivery_that_cannot_be_sent_fails_alone_and_opens_no_circuit(
    httpserver, monkeypatch, where
):
    httpserver.expect_request("/hooks").respond_with_data("", status=204)
    broken, healthy = (
        WebhookSubscriptionFactory(url=httpserver.url_for(f"/hooks?n={n}")) for n in range(2)
    )
    real = getattr(delivery_lane, where)

    def failing_for_broken(*args):
        subscription_id = args[0].subscription_id if where == "send" else args[0].pk
        if subscription_id == broken.pk:
            raise ValueError("a bug, say")
        return real(*args)

    monkeypatch.setattr(delivery_lane, where, failing_for_broken)
    six_events()  # more than CIRCUIT_FAILURES: the broken one's would open its circuit
    before = counted("jobtracking_webhook_delivery_errors_total", stage="send")
    assert lane_round() == 12
    assert set(
        WebhookDelivery.objects.filter(subscription=healthy).values_list("state", flat=True)
    ) == {"delivered"}
    failed = WebhookDelivery.objects.filter(subscription=broken)
    assert set(failed.values_list("state", "attempts")) == {("pending", 1)}
    assert all(
        error.startswith("Unsendable: ValueError")
        for error in failed.values_list("last_error", flat=True)
    )
    assert not ReceiverHealth.objects.filter(pk=broken.pk, failures__gt=0).exists()
    assert counted("jobtracking_webhook_delivery_errors_total", stage="send") == before + (
        6 if where == "send" else 1  # a receiver is found once a round
    )


@pytest.mark.django_db(transaction=True)
def test_the_lane_logs_counts_and_goes_on_after_a_round_fails(
    seeded_statuses, receiver, httpserver, monkeypatch, caplog
):
    httpserver.expect_request("/hooks").respond_with_data("", status=204)
    make_job()
    lane = DeliveryLane()
    real, calls = delivery_lane.deliveries_claim_due, []

    def claim_failing_once(**kwargs):
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("injected")
        if len(calls) == 3:
            lane.stop()  # the round after the delivery's
        return real(**kwargs)

    monkeypatch.setattr(delivery_lane, "deliveries_claim_due", claim_failing_once)
    monkeypatch.setattr(delivery_lane, "BACKOFF_FIRST_SECONDS", 0.1)
    before = counted("jobtracking_loop_errors_total", loop="delivery_lane")
    with caplog.at_level(logging.ERROR, logger="jobtracking.engine.delivery_lane"):
        lane.rounds(dispatcher=os.getppid())
    assert WebhookDelivery.objects.get().state == "delivered"
    (failure,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "a round failed" in failure.getMessage() and failure.exc_info[0] is RuntimeError
    assert counted("jobtracking_loop_errors_total", loop="delivery_lane") == before + 1
    assert b'jobtracking_loop_errors_total{loop="delivery_lane"}' in metrics.render()
    assert calls[1] - calls[0] >= 0.1  # after its backoff
