import itertools

import pytest

from jobtracking import states

# The lifecycle of DESIGN §4, restated by hand so that a change to the table must be deliberate.
EXPECTED = {
    (None, "pending"),
    ("pending", "submitting"),
    ("submitting", "pending"),
    ("submitting", "submitted"),
    ("submitted", "processing"),
    ("submitted", "succeeded"),
    ("processing", "succeeded"),
    *{
        (s, t)
        for s in ("pending", "submitting", "submitted", "processing")
        for t in ("failed", "timed_out", "cancelled")
    },
    *{(s, "pending") for s in ("succeeded", "failed", "timed_out", "cancelled")},
}


def test_states_split_into_four_active_and_four_terminal():
    assert states.ACTIVE == {"pending", "submitting", "submitted", "processing"}
    assert states.TERMINAL == {"succeeded", "failed", "timed_out", "cancelled"}


@pytest.mark.parametrize(
    ("from_status", "to_status"),
    list(itertools.product([None, *sorted(states.ALL)], sorted(states.ALL))),
)
def test_is_allowed_matches_the_lifecycle(from_status, to_status):
    assert states.is_allowed(from_status, to_status, force=True) == (
        (from_status, to_status) in EXPECTED
    )


def test_is_allowed_requeue_of_succeeded_needs_force():
    assert not states.is_allowed("succeeded", "pending")
    assert states.is_allowed("succeeded", "pending", force=True)
    assert states.is_allowed("failed", "pending")


def test_event_type_names_client_facing_moves_only():
    assert states.event_type(None, "pending") == "job.created"
    assert states.event_type("failed", "pending") == "job.requeued"
    assert states.event_type("processing", "succeeded") == "job.succeeded"
    assert states.event_type("pending", "submitting") is None
    assert states.event_type("submitting", "pending") is None
    published = {t for t in states.TRANSITIONS.values() if t}
    assert published == set(states.EVENT_TYPES)
