"""Hands work to django-q2. Tasks get the job id and nothing else (options go in q_options,
so no argument name is ever mistaken for a django-q2 option)."""

from uuid import UUID

from django_q.tasks import async_task


def enqueue_process(job_id: UUID | str) -> None:
    async_task(
        "jobtracking.tasks.process_job",
        str(job_id),
        q_options={"task_name": f"process {job_id}", "group": "jobs"},
    )


def enqueue_cancel_at_extractor(job_id: UUID | str) -> None:
    async_task(
        "jobtracking.tasks.cancel_at_extractor",
        str(job_id),
        q_options={"task_name": f"cancel at extractor {job_id}", "group": "jobs"},
    )


def enqueue_delivery(delivery_id: int) -> None:
    async_task(
        "jobtracking.tasks.deliver_webhook",
        delivery_id,
        q_options={"task_name": f"webhook delivery {delivery_id}", "group": "webhooks"},
    )
