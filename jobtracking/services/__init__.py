"""Every write to a job's state, by concern:

- `transitions`: the single writer of status (`jobs_transition` for a batch, `job_transition`
  for one job) and `Actor`;
- `creation`: new jobs, one at a time, idempotent or in bulk;
- `operations`: what people and housekeeping do (requeue, cancel, time out, hand back a lease);
- `engine`: the worker's batched steps (start, record) and the extractor limits they enforce.
"""

from jobtracking.services.creation import (
    NewJob,
    job_create,
    job_create_idempotent,
    job_create_many,
)
from jobtracking.services.operations import (
    job_cancel,
    job_hand_back_expired_lease,
    job_requeue,
    job_time_out,
    jobs_set_priority,
)
from jobtracking.services.transitions import (
    SYSTEM,
    Actor,
    Move,
    job_transition,
    jobs_transition,
)

__all__ = [
    "SYSTEM",
    "Actor",
    "Move",
    "NewJob",
    "job_cancel",
    "job_create",
    "job_create_idempotent",
    "job_create_many",
    "job_hand_back_expired_lease",
    "job_requeue",
    "job_time_out",
    "job_transition",
    "jobs_set_priority",
    "jobs_transition",
]
