import random
from datetime import timedelta

from jobtracking.engine.schedule import next_delay

INITIAL = timedelta(seconds=2)
CAP = timedelta(seconds=30)


def test_next_delay_first_step_waits_exactly_the_initial_interval():
    assert next_delay(0, initial=INITIAL, cap=CAP) == INITIAL


def test_next_delay_first_step_waits_for_a_longer_retry_after():
    assert next_delay(0, initial=INITIAL, cap=CAP, retry_after=7) == timedelta(seconds=7)


def test_next_delay_grows_by_half_with_at_most_20_percent_jitter():
    rng = random.Random(1)
    for step in range(1, 12):
        base = min(30.0, 2 * 1.5**step)
        delay = next_delay(step, initial=INITIAL, cap=CAP, rng=rng).total_seconds()
        assert 0.8 * base <= delay <= base


def test_next_delay_never_exceeds_the_cap_unless_retry_after_says_so():
    assert next_delay(40, initial=INITIAL, cap=CAP) <= CAP
    assert next_delay(40, initial=INITIAL, cap=CAP, retry_after=90) == timedelta(seconds=90)


def test_next_delay_is_never_sooner_than_retry_after():
    rng = random.Random(3)
    for step in range(10):
        delay = next_delay(step, initial=INITIAL, cap=CAP, retry_after=4.5, rng=rng)
        assert delay >= timedelta(seconds=4.5)
