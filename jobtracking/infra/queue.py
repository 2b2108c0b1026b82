"""Hands work to django-q2. Tasks get job ids and nothing else (options go in q_options,
so no argument name is ever mistaken for a django-q2 option)."""

from uuid import UUID

from django_q.tasks import async_task

PROCESS_JOBS = "jobtracking.engine.tasks.process_jobs"
CANCEL_AT_EXTRACTOR = "jobtracking.engine.tasks.cancel_at_extractor"

# What a task waiting in the broker is, by the last name of the function it runs: a task keeps
# the path it was enqueued with, so tasks from before a module moved (`jobtracking.tasks.…`) or
# from before the delivery lane took webhook deliveries out of the broker still read right.
# Scheduled functions are housekeeping; anything else is "other".
JOB_BATCHES, JOB_WORK, DELIVERIES = "job batches", "other job work", "webhook deliveries"
HOUSEKEEPING, OTHER = "housekeeping", "other"
TASK_KINDS = {
    PROCESS_JOBS.rpartition(".")[2]: JOB_BATCHES,
    "process_job": JOB_BATCHES,  # one job a task, from before batches
    CANCEL_AT_EXTRACTOR.rpartition(".")[2]: JOB_WORK,
    "deliver_webhook": DELIVERIES,  # from before the delivery lane
}
KIND_ORDER = (JOB_BATCHES, JOB_WORK, DELIVERIES, HOUSEKEEPING, OTHER)


def task_kind(func: str, scheduled: set[str]) -> str:
    """The kind of a task running `func` (a dotted path); `scheduled` holds the last names of
    the functions the schedules run."""
    name = func.rpartition(".")[2]
    return TASK_KINDS.get(name) or (HOUSEKEEPING if name in scheduled else OTHER)


def enqueue_batch(job_ids: list[UUID]) -> None:
    """One task for a batch of jobs of one extractor."""
    async_task(
        PROCESS_JOBS,
        [str(pk) for pk in job_ids],
        q_options={"task_name": f"process {len(job_ids)} from {job_ids[0]}", "group": "jobs"},
    )


def enqueue_cancel_at_extractor(job_id: UUID | str) -> None:
    async_task(
        CANCEL_AT_EXTRACTOR,
        str(job_id),
        q_options={"task_name": f"cancel at extractor {job_id}", "group": "jobs"},
    )
