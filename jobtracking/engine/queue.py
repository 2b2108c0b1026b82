"""Hands work to django-q2. Tasks get job ids and nothing else (options go in q_options,
so no argument name is ever mistaken for a django-q2 option)."""

from uuid import UUID

from django_q.tasks import async_task


def enqueue_batch(job_ids: list[UUID]) -> None:
    """One task for a batch of jobs of one extractor."""
    async_task(
        "jobtracking.engine.tasks.process_jobs",
        [str(pk) for pk in job_ids],
        q_options={"task_name": f"process {len(job_ids)} from {job_ids[0]}", "group": "jobs"},
    )


def enqueue_cancel_at_extractor(job_id: UUID | str) -> None:
    async_task(
        "jobtracking.engine.tasks.cancel_at_extractor",
        str(job_id),
        q_options={"task_name": f"cancel at extractor {job_id}", "group": "jobs"},
    )
