"""A batch of moves stores the same rows on both paths (`services.moves_written`): the one
statement PostgreSQL runs and the ORM's writes (SQLite's), every column of every row of every
table a batch writes, for the same batch."""

from datetime import timedelta
from unittest import mock

import pytest
from django.db import connection, models, transaction

from extraction.errors import ErrorCode
from jobtracking import states
from jobtracking.infra.rows import row_set
from jobtracking.models import (
    ActorType,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    Priority,
    UsageRecord,
    WebhookDelivery,
)
from jobtracking.services import Actor, job_cancel, job_requeue, jobs_set_priority
from jobtracking.services import moves_written as module
from jobtracking.services.engine import Result, fail_move, jobs_record, poll_move, succeeded_move
from jobtracking.services.moves_written import MovesWritten
from tests.factories import ExtractionJobFactory, UserFactory, WebhookSubscriptionFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL statement"),
]

WRITTEN = (ExtractionJob, JobStatusChange, JobEvent, WebhookDelivery, UsageRecord, ExtractionResult)
SERIAL = (models.AutoField, models.BigAutoField)


class Undone(Exception):
    pass


def stored() -> dict[str, list[str]]:
    """Every column of every row of the tables a batch writes, each row as its repr (JSON's
    1 and 1.0 differ there), in the order of their ids: an event's place in the feed too. An
    id a sequence gives is left out (a run rolled back does not give it back), and an event is
    named by its `event_id` where a delivery points to it (whose order says nothing)."""
    events = dict(JobEvent.objects.values_list("id", "event_id"))
    tables = {}
    for model in WRITTEN:
        names = [f.attname for f in model._meta.concrete_fields if not isinstance(f, SERIAL)]
        rows = model.objects.order_by("pk").values(*names)
        if model is WebhookDelivery:
            named = ({**row, "event_id": events[row["event_id"]]} for row in rows)
            tables[model.__name__] = sorted(map(repr, named))
        else:
            tables[model.__name__] = list(map(repr, rows))
    return tables


def rows_of(write) -> dict[str, list[str]]:
    """What `write` stores, undone again (its savepoint rolled back)."""
    try:
        with transaction.atomic():
            write()
            rows = stored()
            raise Undone
    except Undone:
        return rows


@pytest.fixture
def both_paths():
    """Each batch written on both paths in turn, each undone, then written for the next batch;
    the rows each path stored, by batch."""
    compared = []

    def write(written: MovesWritten) -> None:
        compared.append((rows_of(written.in_one_statement), rows_of(written.with_the_orm)))
        written.in_one_statement()

    with mock.patch.object(MovesWritten, "write", write):
        yield compared


def batches(tmp_path, settings) -> None:
    """Batches of every kind of row: the engine's record step with results inline, in files and
    made safe, failures and a poll; a person's cancel, priority change and requeue."""
    settings.MEDIA_ROOT, settings.JOBS_RESULT_INLINE_MAX_BYTES = tmp_path, 40
    user = UserFactory()
    WebhookSubscriptionFactory(all_jobs=True)
    WebhookSubscriptionFactory(event_types=["job.failed"], all_jobs=True)
    WebhookSubscriptionFactory(created_by=user)
    WebhookSubscriptionFactory(active=False, all_jobs=True)
    inline, in_file, made_safe, failed, polled = (
        ExtractionJobFactory(processing=True, requested_by=user if n % 2 else UserFactory())
        for n in range(5)
    )
    results = {
        inline.pk: Result({"pages": [1.0, 2]}, 2, "v1", 2),
        in_file.pk: Result({"text": "x" * 100}, None, "v2", 7),
        made_safe.pk: Result({"a": "b"}, 1, "", 1, made_safe=["$.a"], original=b"a\x00"),
    }
    moves = [
        *(
            succeeded_move(pk, seen_status=states.PROCESSING, raw_status="done", result=result)
            for pk, result in results.items()
        ),
        fail_move(
            failed.pk,
            expected_from={states.PROCESSING},
            code=ErrorCode.EXTRACTION_FAILED,
            message="no text",
            remote=("failed", 30),
            billed_pages=3,
        ),
        poll_move(
            polled.pk,
            seen_status=states.PROCESSING,
            to_status=None,
            raw_status="running",
            progress=60,
            next_poll_in=timedelta(seconds=5),
        ),
    ]
    jobs_record(moves=moves, results=results)
    person = Actor(ActorType.API, user, {"ip": "192.0.2.1"})
    active = ExtractionJobFactory(submitted=True, requested_by=user)
    jobs_set_priority(job_ids=[active.pk], priority=Priority.INTERACTIVE, actor=person)
    job_cancel(job_id=active.pk, actor=person, reason="not needed")
    job_requeue(job_id=failed.pk, actor=person)


def test_both_paths_store_the_same_rows_for_the_same_moves(tmp_path, settings, both_paths):
    batches(tmp_path, settings)
    assert len(both_paths) == 4
    for in_one_statement, with_the_orm in both_paths:
        assert in_one_statement == with_the_orm
    record_step = both_paths[0][0]
    # The record step wrote a row to every table: the comparison saw each of them.
    assert len(record_step["ExtractionResult"]) == 3 and len(record_step["UsageRecord"]) == 4
    assert len(record_step["WebhookDelivery"]) > len(record_step["JobEvent"]) == 4


def test_the_comparison_sees_a_column_one_path_leaves_out(
    tmp_path, settings, both_paths, monkeypatch
):
    # A value the statement would leave out: the audit row's actor (NULL there).
    actor = JobStatusChange._meta.get_field("actor")
    monkeypatch.setattr(
        module,
        "row_set",
        lambda objs, fields: row_set(objs, tuple(f for f in fields if f is not actor)),
    )
    batches(tmp_path, settings)
    assert any(statement != orm for statement, orm in both_paths)
