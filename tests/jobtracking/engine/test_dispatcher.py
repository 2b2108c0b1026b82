"""The dispatcher's loop: every client's work waits on it, so it goes on from any error."""

import logging
import time

import pytest
from prometheus_client import REGISTRY

from jobtracking.engine import delivery_lane
from jobtracking.engine.dispatcher import Dispatcher

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_dispatcher_logs_counts_and_goes_on_after_a_round_fails(
    seeded_statuses, own_signals, monkeypatch, caplog
):
    ticks, real = [], Dispatcher.tick

    def tick_failing_once(dispatcher):
        ticks.append(time.monotonic())
        if len(ticks) == 1:
            raise RuntimeError("injected")
        dispatcher.stop()
        return real(dispatcher)

    monkeypatch.setattr(Dispatcher, "tick", tick_failing_once)
    monkeypatch.setattr(delivery_lane, "BACKOFF_FIRST_SECONDS", 0.1)
    before = REGISTRY.get_sample_value("jobtracking_loop_errors_total", {"loop": "dispatcher"})
    dispatcher = Dispatcher(idle=0.01)
    try:
        with caplog.at_level(logging.ERROR, logger="jobtracking.engine.dispatcher"):
            dispatcher.run()  # with its real lane, stopped at the end
    finally:
        dispatcher.stop()  # however it ended: no lane may outlive the test
        dispatcher.lane.join(timeout=5)

    assert len(ticks) == 2 and ticks[1] - ticks[0] >= 0.1  # went on, after its backoff
    (failure,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "a round failed" in failure.getMessage() and failure.exc_info[0] is RuntimeError
    after = REGISTRY.get_sample_value("jobtracking_loop_errors_total", {"loop": "dispatcher"})
    assert after == (before or 0) + 1
    assert not dispatcher.lane.is_alive()
