"""Rows as JSON for the one-statement inserts (`jobtracking.rows`)."""

import json

import pytest
from django.core.files.base import ContentFile
from django.db.models import signals
from django.utils import timezone

from jobtracking.models import ActorType, ExtractionJob, JobEvent, JobStatusChange
from jobtracking.rows import insert_fields, instance, json_rows, row_set
from jobtracking.services.creation import NewJob, job_create_many
from jobtracking.services.transitions import Actor
from tests.factories import ExtractorFactory, UserFactory, api_job

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
