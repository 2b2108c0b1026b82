"""The job lifecycle as data: statuses, which are terminal, and every allowed transition.

Pure Python on purpose, so the table is tested without a database. Each allowed transition maps to
the event type it publishes, or to None for the internal lease moves (taking a job for submission,
handing it back after a transient fault), which are audited but are not client-facing events.
"""

from collections.abc import Mapping

PENDING = "pending"
SUBMITTING = "submitting"
SUBMITTED = "submitted"
PROCESSING = "processing"
SUCCEEDED = "succeeded"
FAILED = "failed"
TIMED_OUT = "timed_out"
CANCELLED = "cancelled"

# (code, label, terminal, meaning) in lifecycle order; the data migration seeds JobStatus from it.
STATUSES: tuple[tuple[str, str, bool, str], ...] = (
    (PENDING, "Pending", False, "Created or requeued, waiting to be submitted"),
    (SUBMITTING, "Submitting", False, "A worker holds a lease and is sending it to the extractor"),
    (SUBMITTED, "Submitted", False, "The extractor accepted it, not yet running"),
    (PROCESSING, "Processing", False, "The extractor reports it running"),
    (SUCCEEDED, "Succeeded", True, "The extractor finished and the result is stored"),
    (FAILED, "Failed", True, "Permanent error, or retries or error budget exhausted"),
    (TIMED_OUT, "Timed out", True, "The job's deadline passed before the extractor finished"),
    (CANCELLED, "Cancelled", True, "Cancelled by a person or client, or by the extractor"),
)

ALL = frozenset(code for code, *_ in STATUSES)
TERMINAL = frozenset(code for code, _, terminal, _ in STATUSES if terminal)
ACTIVE = ALL - TERMINAL
# Ends that the extractor reports only about a job it worked on (its cancel may come before).
WORKED_ENDS = frozenset({SUCCEEDED, FAILED})
# Taken by the engine: at the extractor or on the way to it (pending jobs wait to be taken).
IN_FLIGHT = ACTIVE - {PENDING}

EVENT_CREATED = "job.created"
EVENT_REQUEUED = "job.requeued"
EVENT_TYPES: tuple[str, ...] = (
    EVENT_CREATED,
    "job.submitted",
    "job.processing",
    "job.succeeded",
    "job.failed",
    "job.timed_out",
    "job.cancelled",
    EVENT_REQUEUED,
)

# A batch's events (`services.batches`, `services.batch_completion`), through the same outbox.
BATCH_CREATED = "batch.created"
BATCH_COMPLETED = "batch.completed"
BATCH_CANCELLED = "batch.cancelled"
BATCH_EVENT_TYPES: tuple[str, ...] = (BATCH_CREATED, BATCH_COMPLETED, BATCH_CANCELLED)
# Every type the outbox carries, the feed filters by and webhooks subscribe to.
OUTBOX_EVENT_TYPES = EVENT_TYPES + BATCH_EVENT_TYPES

TRANSITIONS: Mapping[tuple[str | None, str], str | None] = {
    (None, PENDING): EVENT_CREATED,
    (PENDING, SUBMITTING): None,
    (SUBMITTING, PENDING): None,
    (SUBMITTING, SUBMITTED): "job.submitted",
    (SUBMITTED, PROCESSING): "job.processing",
    (SUBMITTED, SUCCEEDED): "job.succeeded",
    (PROCESSING, SUCCEEDED): "job.succeeded",
    **{(status, FAILED): "job.failed" for status in ACTIVE},
    **{(status, TIMED_OUT): "job.timed_out" for status in ACTIVE},
    **{(status, CANCELLED): "job.cancelled" for status in ACTIVE},
    **{(status, PENDING): EVENT_REQUEUED for status in TERMINAL},
}

# Redoing a successful extraction costs money and replaces what clients already read.
NEEDS_FORCE = frozenset({(SUCCEEDED, PENDING)})


def is_allowed(from_status: str | None, to_status: str, *, force: bool = False) -> bool:
    if (from_status, to_status) not in TRANSITIONS:
        return False
    return force or (from_status, to_status) not in NEEDS_FORCE


def requeue_allowed(from_status: str, *, force: bool = False) -> bool:
    """A requeue starts a new attempt of a job that ended. (submitting → pending is in the table
    too, but as the hand-back of an expired lease, within the same attempt.)"""
    return from_status in TERMINAL and is_allowed(from_status, PENDING, force=force)


def event_type(from_status: str | None, to_status: str) -> str | None:
    return TRANSITIONS[(from_status, to_status)]
