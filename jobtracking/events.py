"""The outbox's payloads: what an event says about its job or its batch."""

import functools
from typing import Any

from jobtracking.models import Batch, ExtractionJob
from jobtracking.representation import JobRepresentation, batch_representation


@functools.cache
def event_representation() -> JobRepresentation:
    """The process's writer of event payloads: links from the API's path, and the moments
    that events written close together share kept, the oldest let go (it lives as long as
    the process)."""
    return JobRepresentation(moments_kept=1024)


def job_event_payload(job: ExtractionJob) -> dict[str, Any]:
    """The job as `GET /api/v1/jobs/<id>/` shows it (`jobtracking.representation`), frozen at
    the moment of the event: the pull feed's `payload` and a webhook body's `data`. Its links
    are the API's paths (`/api/v1/jobs/<id>/`), not absolute URLs: a worker has no request to
    take the service's address from. A `job.created` payload gives `updated_at` as the
    creation moment; the insert stamps the row a moment later.

    Reads no database: callers load the job's extractor and requester with it (the locked
    reads of `services.transitions` and `services.engine`; creation attaches both)."""
    return event_representation()(job)


def batch_event_payload(batch: Batch, summary) -> dict[str, Any]:
    """The batch as `GET /api/v1/batches/<id>/` shows it at the moment of the event (its counts
    then), without its failed jobs' list, and with links as the API's paths. `summary` is its
    `selectors.BatchSummary`, read in the transaction that writes the event."""
    return batch_representation(batch, summary)
