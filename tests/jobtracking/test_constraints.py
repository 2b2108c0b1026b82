"""The database itself enforces the ERD's rules, whatever code writes the rows."""

import pytest
from django.db import IntegrityError

from jobtracking import states
from tests.factories import ExtractionJobFactory, ExtractorFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("status", sorted(states.ACTIVE))
def test_database_refuses_a_second_active_job_for_the_same_file(status):
    first = ExtractionJobFactory(file_id="f")
    with pytest.raises(IntegrityError, match="job_one_active_per_file"):
        ExtractionJobFactory(extractor=first.extractor, file_id="f", status_id=status)


@pytest.mark.parametrize("status", sorted(states.TERMINAL))
def test_database_allows_any_number_of_terminal_jobs_for_a_file(status):
    extractor = ExtractorFactory()
    ExtractionJobFactory(extractor=extractor, file_id="f")
    ExtractionJobFactory.create_batch(2, extractor=extractor, file_id="f", status_id=status)


def test_database_refuses_a_job_with_no_source():
    with pytest.raises(IntegrityError, match="job_exactly_one_source"):
        ExtractionJobFactory(source_url="", upload="")


def test_database_refuses_a_job_with_two_sources():
    with pytest.raises(IntegrityError, match="job_exactly_one_source"):
        ExtractionJobFactory(upload="uploads/a.pdf")


def test_database_refuses_progress_out_of_range():
    with pytest.raises(IntegrityError, match="job_progress_range"):
        ExtractionJobFactory(progress=101)


def test_database_refuses_a_reused_idempotency_key_for_the_same_user_only():
    user = UserFactory()
    ExtractionJobFactory(requested_by=user, idempotency_key="k1")
    ExtractionJobFactory(requested_by=UserFactory(), idempotency_key="k1")
    ExtractionJobFactory(requested_by=user, idempotency_key=None)
    ExtractionJobFactory(requested_by=user, idempotency_key=None)
    with pytest.raises(IntegrityError, match="job_idempotency_key_per_user"):
        ExtractionJobFactory(requested_by=user, idempotency_key="k1")


def test_job_status_table_is_seeded_by_migration():
    from jobtracking.models import JobStatus

    rows = {s.code: s.terminal for s in JobStatus.objects.all()}
    assert rows == {status.code: status.terminal for status in states.STATUSES}


def test_due_index_is_partial_over_active_jobs_only(django_assert_num_queries):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'job_due_active_idx'")
        (definition,) = cursor.fetchone()
    assert "WHERE" in definition and "pending" in definition and "succeeded" not in definition
