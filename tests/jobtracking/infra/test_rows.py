"""Rows as JSON for the one-statement inserts (`jobtracking.infra.rows`)."""

import datetime
import decimal
import functools
import json
from unittest import mock

import pytest
from django.core.files.base import ContentFile
from django.db import IntegrityError, connection, transaction
from django.db.models import Value, signals
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobtracking.infra.rows import (
    insert_fields,
    insert_statement,
    instance,
    json_rows,
    prepared_cursor,
    row_set,
    select_rows,
)
from jobtracking.models import ActorType, ExtractionJob, JobEvent, JobStatusChange, WebhookDelivery
from jobtracking.services.creation import NewJob, job_create_many
from jobtracking.services.transitions import Actor
from tests.factories import ExtractorFactory, UserFactory, api_job
from tests.testapp.models import Specimen

pytestmark = pytest.mark.django_db


def test_a_row_holds_each_column_as_the_database_stores_it(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path
    extractor = ExtractorFactory()
    now = timezone.now()
    job = instance(
        ExtractionJob,
        extractor_id=extractor.pk,
        status_id="pending",
        file_id="f",
        priority=2,
        created_at=now,
    )
    job.upload.save("a.pdf", ContentFile(b"%PDF-1.7"), save=False)
    (row,) = json.loads(json_rows([job], insert_fields(ExtractionJob)))
    assert row["id"] == str(job.pk) and row["extractor_id"] == extractor.pk
    assert row["created_at"] == now.isoformat() and row["priority"] == 2
    assert row["upload"] == job.upload.name and row["upload"].endswith(".pdf")
    assert (row["options"], row["attempt"], row["file_size"]) == ({}, 1, None)
    assert row["updated_at"] >= now.isoformat()  # auto_now: set when the row is written


@pytest.mark.parametrize("metadata", [{"n": 10**30}, {"nested": {"n": -(2**70)}}])
def test_integers_beyond_64_bits_in_json_fields_are_stored_as_given(metadata):
    job = api_job(metadata=metadata)
    assert ExtractionJob.objects.get(pk=job.pk).metadata == metadata


def test_instance_builds_with_the_fields_defaults_and_refuses_unknown_fields():
    user = UserFactory()
    change = instance(JobStatusChange, to_status_id="pending", attempt=1, actor_id=user.pk)
    assert (change.details, change.reason, change.actor) == ({}, "", user)
    with pytest.raises(TypeError, match="no fields \\['actor'\\]"):
        instance(JobStatusChange, actor=user)


@pytest.mark.parametrize(
    ("model", "values"),
    [
        (ExtractionJob, {"extractor_id": 1, "status_id": "pending", "file_id": "f", "priority": 2}),
        (JobStatusChange, {"to_status_id": "pending", "attempt": 1, "reason": "r"}),
        (JobEvent, {"type": "job.created", "payload": {"a": 1}}),
        (WebhookDelivery, {"event_id": 1, "subscription_id": 2}),
        # db_default, generated, JSON, file, auto_now and custom fields.
        (Specimen, {"name": "a", "count": None, "tags": ["x"]}),
    ],
)
def test_instance_leaves_the_object_as_the_models_own_init_does(model, values):
    made, built = model(**values), instance(model, **values)
    # Made by a callable default per object (ids, timestamps, empty dicts): the same kind of
    # value, and a fresh one where it is unique.
    fields = model._meta.concrete_fields
    called = {f.attname: f for f in fields if f.has_default() and callable(f.default)}
    assert vars(built).keys() == vars(made).keys()
    assert {k: v for k, v in vars(built).items() if k not in {"_state", *called}} == {
        k: v for k, v in vars(made).items() if k not in {"_state", *called}
    }
    for name, field in called.items():
        assert type(getattr(built, name)) is type(getattr(made, name))
        assert not field.unique or getattr(built, name) != getattr(made, name)
    assert (built._state.adding, built._state.db) == (True, None)


def test_instance_uses_the_models_init_where_init_signals_are_heard():
    heard = []

    def listener(sender, instance, **kwargs):
        heard.append(instance)

    signals.post_init.connect(listener, sender=JobEvent)
    try:
        event = instance(JobEvent, type="job.created", payload={})
    finally:
        signals.post_init.disconnect(listener, sender=JobEvent)
    assert heard == [event]


def test_a_row_set_sends_the_values_every_row_shares_once():
    now = timezone.now()
    jobs = [
        instance(
            ExtractionJob, extractor_id=1, status_id="pending", file_id=f"f-{n}", created_at=now
        )
        for n in range(3)
    ]
    rows = row_set(jobs, insert_fields(ExtractionJob))
    assert {field.name for field in rows.own} == {"id", "file_id", "updated_at"}
    assert [row["file_id"] for row in json.loads(rows.rows)] == ["f-0", "f-1", "f-2"]
    shared = json.loads(rows.shared)
    assert (shared["status_id"], shared["created_at"], shared["options"]) == (
        "pending",
        now.isoformat(),
        {},
    )


@pytest.mark.parametrize(
    "values",
    [
        [{"n": 1}, {"n": True}],
        [{"n": 1}, {"n": 1.0}],
        [{"n": [0]}, {"n": [False]}],
        [{"a": 1, "b": 2}, {"a": 1, "b": 2}, {"a": 1, "b": 2.0}],
    ],
)
def test_json_values_that_python_finds_equal_but_the_database_does_not_are_not_shared(values):
    extractor = ExtractorFactory()
    items = [
        NewJob(
            extractor=extractor,
            file_id=f"f-{n}",
            source_url="https://a.test/f.pdf",
            metadata=metadata,
        )
        for n, metadata in enumerate(values)
    ]
    outcomes = job_create_many(items, actor=Actor(ActorType.SYSTEM))
    stored = ExtractionJob.objects.in_bulk([outcome.job.pk for outcome in outcomes])
    assert [json.dumps(stored[o.job.pk].metadata) for o in outcomes] == [
        json.dumps(v) for v in values
    ]


def test_rows_that_share_every_value_still_count_a_row_each():
    now = timezone.now()
    jobs = [instance(JobEvent, type="job.created", payload={}, created_at=now) for _ in range(2)]
    rows = row_set(jobs, insert_fields(JobEvent, exclude=("event_id", "job")))
    assert (rows.own, json.loads(rows.rows)) == ((), [{}, {}])


def test_one_objects_row_set_shares_every_value_as_its_row_holds_them():
    job = instance(ExtractionJob, extractor_id=1, status_id="pending", file_id="f", priority=2)
    fields = insert_fields(ExtractionJob)
    rows = row_set([job], fields)
    (row,) = json.loads(json_rows([job], fields))
    shared = json.loads(rows.shared)
    assert (rows.own, rows.rows) == ((), "[{}]")
    assert shared.pop("updated_at") <= row.pop("updated_at")  # auto_now: at each reading
    assert shared == row


NOW = timezone.now()
# What varies between specimens: values left at their db_default (count, note), an explicit
# null beside a default, JSON Python finds equal but the database does not, a JSON field's own
# encoder, files, decimals, durations, times, bytes, addresses and a field whose
# get_db_prep_save transforms its value.
SPECIMENS = {
    "one": [{"name": "solo", "count": None, "tags": ["a", "b"]}],
    "all at their defaults": [{"name": "a"}, {"name": "b"}],
    "varied": [
        {"name": "a"},
        {"name": "b", "count": None, "note": "given", "data": {"n": 1}, "price": "2.500"},
        {"name": "c", "count": 3, "data": {"n": True}, "tags": ["x", "y"]},
        {
            "name": "d",
            "encoded": {"at": NOW, "amount": decimal.Decimal("1.50")},
            "document": "specimens/d.txt",
            "price": decimal.Decimal("2.5"),
            "wait": datetime.timedelta(days=1, microseconds=7),
            "at": datetime.time(12, 30, 1, 5),
            "blob": b"\x00\xff",
            "address": "2001:db8::1",
        },
    ],
}


def insert_rows(objs: list) -> None:
    rows = row_set(objs, insert_fields(Specimen))
    with prepared_cursor() as cursor:
        cursor.execute(insert_statement(Specimen, rows.own), [rows.rows, rows.shared])


def stored() -> list[dict]:
    """The specimens' columns (not their ids, new in each)."""
    rows = Specimen.objects.order_by("name").values()
    return [{name: value for name, value in row.items() if name != "id"} for row in rows]


@pytest.mark.parametrize("build", [Specimen, functools.partial(instance, Specimen)])
@pytest.mark.parametrize("specimens", SPECIMENS.values(), ids=SPECIMENS.keys())
def test_a_row_set_stores_what_bulk_create_stores(specimens, build):
    with mock.patch("django.utils.timezone.now", return_value=NOW):  # auto_now
        insert_rows([build(**values) for values in specimens])
        by_rows = stored()
        Specimen.objects.all().delete()
        Specimen.objects.bulk_create([Specimen(**values) for values in specimens])
    by_bulk_create = stored()
    assert by_rows == by_bulk_create
    assert [row["shout"] for row in by_bulk_create] == [v["name"].upper() for v in specimens]


def test_a_row_leaves_out_a_value_left_at_its_db_default_but_keeps_a_null():
    defaulted, nulled = Specimen(name="a"), Specimen(name="b", count=None)
    rows = json.loads(json_rows([defaulted, nulled], insert_fields(Specimen)))
    assert ("count" in rows[0], rows[1]["count"]) == (False, None)
    stored = select_rows(Specimen, insert_fields(Specimen, exclude=("id",)))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count, note FROM ({stored}) t", [json.dumps(rows)])
        assert cursor.fetchall() == [(7, "100% default"), (None, "100% default")]


def test_a_row_holds_what_the_fields_get_db_prep_save_gives():
    specimen = Specimen(name="a", tags=["x", "y"], encoded={"amount": decimal.Decimal("1.50")})
    (row,) = json.loads(json_rows([specimen], insert_fields(Specimen)))
    # The custom field's joined text and the JSON field's encoder's string, not the values.
    assert (row["tags"], row["encoded"]) == ("x,y", {"amount": "1.50"})
    assert "shout" not in row  # generated: the database writes it


def test_an_expression_as_a_value_is_refused():
    specimen = Specimen(name="a", count=Value(3))
    with pytest.raises(TypeError, match="expression"):
        json_rows([specimen], insert_fields(Specimen))


def statement_prepared(sql: str) -> list[bool]:
    """How this connection holds the statement: [from_sql] per prepared copy."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT from_sql FROM pg_prepared_statements WHERE statement = %s", [sql])
        return [from_sql for (from_sql,) in cursor.fetchall()]


PREPARED_SQL = "SELECT %s::int + 1, %s::json ->> 'a'"
PREPARED_TEXT = "SELECT $1::int + 1, $2::json ->> 'a'"  # as psycopg sends it


def run_prepared(number: int) -> tuple:
    with prepared_cursor() as cursor:
        cursor.execute(PREPARED_SQL, [number, json.dumps({"a": "it's"})])
        return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_a_prepared_cursor_prepares_its_statement_once_per_connection():
    connection.close()
    with CaptureQueriesContext(connection) as queries:
        assert run_prepared(1) == (2, "it's")
        assert run_prepared(2) == (3, "it's")
    assert [query["sql"] for query in queries] == [PREPARED_SQL] * 2  # in Django's log
    assert statement_prepared(PREPARED_TEXT) == [False]  # once, by the protocol, not PREPARE
    connection.close()  # a new connection has none of them
    assert statement_prepared(PREPARED_TEXT) == []


@pytest.fixture
def threshold_off():
    """The connection as DB_PREPARED_STATEMENTS=0 configures it."""
    options = connection.settings_dict["OPTIONS"]
    threshold = options["prepare_threshold"]
    connection.close()
    options["prepare_threshold"] = None
    yield
    connection.close()
    options["prepare_threshold"] = threshold


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("threshold_off")
def test_a_prepared_cursor_leaves_its_statement_unprepared_where_the_threshold_is_off():
    assert run_prepared(1) == run_prepared(1) == (2, "it's")
    assert statement_prepared(PREPARED_TEXT) == []


def test_a_prepared_cursor_runs_in_the_callers_transaction_and_raises_djangos_errors():
    specimen = Specimen(name="a")
    with transaction.atomic():
        insert_rows([specimen])
        with pytest.raises(IntegrityError), transaction.atomic():
            insert_rows([specimen])  # the same id
        assert Specimen.objects.count() == 1  # the savepoint kept the transaction usable
        transaction.set_rollback(True)
    assert not Specimen.objects.exists()
    insert_rows([Specimen(name="b")])  # prepared again after the rollback dropped it
    assert Specimen.objects.get().name == "b"
