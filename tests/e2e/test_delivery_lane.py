"""The delivery lane as a real dispatcher runs it: a child process at a lower CPU priority that
delivers, and that never outlives its dispatcher, however the dispatcher ends."""

import os
import signal
from pathlib import Path

import pytest
from django.conf import settings
from werkzeug import Response

from jobtracking.models import DeliveryState, WebhookDelivery, WebhookSubscription
from tests.e2e.conftest import Stack, create_jobs
from tests.e2e.test_supervisor import alive
from tests.processes import descendants, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


AUTOGROUPS = Path("/proc/sys/kernel/sched_autogroup_enabled")


def niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


@pytest.fixture
def lane_stack(seeded_statuses, tmp_path):
    running = Stack(tmp_path, OUTBOUND_ALLOWED_NETWORKS="127.0.0.0/8")
    dispatcher = running.start_dispatcher()
    wait_until(lambda: descendants(dispatcher.pid), 20, "the delivery lane")
    yield running, dispatcher, descendants(dispatcher.pid)[0]
    running.stop_all()


def test_the_lane_is_a_lower_priority_child_that_delivers(lane_stack, extractor, httpserver):
    _stack, dispatcher, lane = lane_stack
    httpserver.expect_request("/hook", method="POST").respond_with_response(Response(status=204))
    WebhookSubscription.objects.create(
        url=httpserver.url_for("/hook"), all_event_types=True, all_jobs=True
    )

    create_jobs(extractor, 2)  # job.created each; no cluster runs, so nothing more

    assert niceness(lane) == niceness(dispatcher.pid) + settings.WEBHOOK_LANE_NICENESS
    # Its own session, so that where Linux groups processes by session for CPU shares, the
    # lane's group has its niceness too (not the dispatcher's equal share against the workers).
    assert os.getsid(lane) == lane != os.getsid(dispatcher.pid)
    if AUTOGROUPS.exists() and AUTOGROUPS.read_text().strip() == "1":
        group = Path(f"/proc/{lane}/autogroup").read_text()
        assert group.endswith(f" nice {settings.WEBHOOK_LANE_NICENESS}\n")
    delivered = WebhookDelivery.objects.filter(state=DeliveryState.DELIVERED)
    wait_until(lambda: delivered.count() == 2, 20, "both deliveries")
    assert len(httpserver.log) == 2
    assert {request.headers["webhook-id"] for request, _ in httpserver.log} == {
        str(d.event.event_id) for d in delivered.select_related("event")
    }


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_lane_ends_with_its_dispatcher(lane_stack, sig):
    _stack, dispatcher, lane = lane_stack

    os.kill(dispatcher.pid, sig)  # the dispatcher alone, not its process group

    dispatcher.wait(timeout=20)
    wait_until(lambda: not alive(lane), 10, "the lane to end")


def test_a_lane_killed_is_started_again_and_deliveries_go_on(lane_stack, extractor, httpserver):
    stack, dispatcher, lane = lane_stack
    httpserver.expect_request("/hook", method="POST").respond_with_response(Response(status=204))
    WebhookSubscription.objects.create(
        url=httpserver.url_for("/hook"), all_event_types=True, all_jobs=True
    )

    os.kill(lane, signal.SIGKILL)

    wait_until(
        lambda: [p for p in descendants(dispatcher.pid) if alive(p)] not in ([], [lane]),
        20,
        "a new lane",
    )
    create_jobs(extractor, 2)
    delivered = WebhookDelivery.objects.filter(state=DeliveryState.DELIVERED)
    wait_until(lambda: delivered.count() == 2, 20, "both deliveries")
    assert dispatcher.poll() is None
    assert "the delivery lane ended (exit code -9); starting it again" in stack.logs()
