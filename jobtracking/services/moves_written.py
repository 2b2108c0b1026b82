"""What a batch of moves writes (`transitions.jobs_transition`): the jobs' changed columns, their
audit rows, events and the events' webhook deliveries, usage rows and results, all at once.

On PostgreSQL that is one statement (`moves_statement`), prepared once per connection for each
shape of batch: rows travel as JSON parameters (`jobtracking.infra.rows`), where the ORM's
inserts and its UPDATE bind every value apart, which cost a worker's batch more CPU than its
moves. Elsewhere (SQLite, `make run`) the ORM writes them; `test_moves_written.py` fails when the
two store different rows for the same moves."""

import functools
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, models

from jobtracking.infra.rows import (
    insert_fields,
    insert_statement,
    json_updates,
    prepared_cursor,
    row_set,
    table,
    update_statement,
)
from jobtracking.models import (
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    UsageRecord,
)
from jobtracking.services.deliveries import deliveries_fan_out, fan_out_statement, fan_out_values

# The rows a batch inserts, in the order the ORM inserts them.
INSERTED = (JobStatusChange, JobEvent, UsageRecord, ExtractionResult)


@dataclass
class MovesWritten:
    """A batch's writes: `changed` (attnames) of every job in `jobs`, and new rows by model
    (`INSERTED`); each event gets its deliveries, created `now`."""

    jobs: list[ExtractionJob]
    changed: list[str]
    rows: dict[type[models.Model], list]
    now: datetime

    def write(self) -> None:
        if not self.changed and not any(self.rows.values()):
            return
        if connection.vendor == "postgresql":
            self.in_one_statement()
        else:
            self.with_the_orm()

    def with_the_orm(self) -> None:
        if self.changed:
            ExtractionJob.objects.bulk_update(self.jobs, self.changed)
        for model in INSERTED:
            created = model.objects.bulk_create(self.rows.get(model, []))
            if model is JobEvent:
                deliveries_fan_out(created, self.now)

    def in_one_statement(self) -> None:
        changed = tuple(ExtractionJob._meta.get_field(name) for name in self.changed)
        params = [json_updates(self.jobs, changed)] if changed else []
        inserted = []
        for model in INSERTED:
            if objs := self.rows.get(model):
                rows = row_set(objs, insert_fields(model))
                inserted.append((model, rows.own))
                params += [rows.rows, rows.shared]
                if model is JobEvent:  # its deliveries' CTE follows
                    params.append(fan_out_values(self.now))
        with prepared_cursor() as cursor:
            cursor.execute(moves_statement(changed, tuple(inserted)), params)


@functools.cache
def moves_statement(changed: tuple, inserted: tuple[tuple, ...]) -> str:
    """One statement of CTEs that updates the jobs' `changed` fields (none: no UPDATE), inserts
    the rows of each (model, own fields) of `inserted` (a `RowSet`), and an event's deliveries.
    Its CTEs all see the snapshot before it: the deliveries read each job's requester, which no
    move changes. Its parameters: the jobs (`json_updates`), each set's rows and shared values,
    the deliveries' values (`fan_out_values`)."""
    ctes = [f"moved AS ({update_statement(ExtractionJob, changed)})"] if changed else []
    for model, own in inserted:
        returning = "id, type, job_id" if model is JobEvent else ""
        ctes.append(
            f"{model._meta.model_name} AS ({insert_statement(model, own, returning=returning)})"
        )
        if model is JobEvent:
            ctes.append(f"deliveries AS ({fan_out_statement('jobevent', table(ExtractionJob))})")
    # Every data-modifying CTE runs, whether the query reads it or not.
    return f"WITH {', '.join(ctes)} SELECT 1"
