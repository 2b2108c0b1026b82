"""A batch's lifecycle as data, beside the job's (`states.py`): its statuses, which follow from
its row and its jobs (`batch_status`), and the actions each status allows (`ALLOWED`). The
services check an action against the table under the batch's row lock (`may`); the admin offers
only what the table allows; the API's answer to a refused action is the action's own error.

    open ──close──> running ──(its last job ends)──> completed / completed_with_failures
      └──────────────┴──cancel──> cancelled
    requeue (of its ended jobs), from any status, reopens a finished batch
"""

OPEN = "open"
RUNNING = "running"
COMPLETED = "completed"
COMPLETED_WITH_FAILURES = "completed_with_failures"
CANCELLED = "cancelled"
STATUSES = (OPEN, RUNNING, COMPLETED, COMPLETED_WITH_FAILURES, CANCELLED)
FINISHED = frozenset({COMPLETED, COMPLETED_WITH_FAILURES})

ADD_JOBS = "add_jobs"
CLOSE = "close"
CANCEL = "cancel"
REQUEUE = "requeue"
# The statuses each action may start from.
ALLOWED: dict[str, frozenset[str]] = {
    # Only an open batch takes jobs: closing it says that all its files are in.
    ADD_JOBS: frozenset({OPEN}),
    # Closing is idempotent: a closed batch stays as it is.
    CLOSE: frozenset(STATUSES),
    # A finished batch has nothing left to cancel, and its `batch.completed` stands; a cancelled
    # one may be cancelled again (what a requeue made active since), with no second event.
    CANCEL: frozenset({OPEN, RUNNING, CANCELLED}),
    # Requeues the jobs that ended without their result (and, with force, the succeeded),
    # whatever the batch's status; a finished batch is reopened by them.
    REQUEUE: frozenset(STATUSES),
}


def batch_status(*, closed: bool, cancelled: bool, active: bool, failures: bool) -> str:
    """A batch's status, from its row and its jobs: cancelled; open while it takes jobs; then
    running while any job is active; then completed, with failures if any job ended without
    its result. `selectors.batch_status_filter` is the same rule as a query."""
    if cancelled:
        return CANCELLED
    if not closed:
        return OPEN
    if active:
        return RUNNING
    return COMPLETED_WITH_FAILURES if failures else COMPLETED


def may(action: str, status: str) -> bool:
    return status in ALLOWED[action]
