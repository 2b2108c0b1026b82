"""Identical documents are not paid twice, end to end: real django-q2 workers and dispatcher,
the sandbox over HTTP. A second upload of a document the same client had extracted takes the
first one's result with no request to the sandbox at all; one that opts out is extracted; two
uploaded at once reach the sandbox once."""

from datetime import timedelta

import pytest
from django.core.files.base import ContentFile

from jobtracking.models import ExtractionResult, UsageCountedBy, UsageRecord
from jobtracking.services import Actor, NewJob, job_create
from tests.e2e.conftest import SAMPLES, assert_no_duplicate_submissions, wait_for_terminal
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NAME = "financial-statement.pdf"  # three pages


def upload(extractor, actor, file_id, **fields):
    new = NewJob(
        extractor=extractor,
        file_id=file_id,
        file_name=NAME,
        upload=ContentFile((SAMPLES / NAME).read_bytes(), name=NAME),
        **fields,
    )
    return job_create(new, actor=actor).pk


def test_a_reused_result_makes_no_extractor_call(stack, sandbox, extractor):
    extractor.reuse_window = timedelta(hours=1)
    extractor.save()
    actor = Actor("api", UserFactory())
    (first,) = wait_for_terminal([upload(extractor, actor, "first")], 60, stack)
    calls_after_first = sandbox.stats()["requests"]

    reused, fresh = wait_for_terminal(
        [upload(extractor, actor, "again"), upload(extractor, actor, "fresh", reuse_result=False)],
        60,
        stack,
    )
    if reused.reuse_result is False:
        reused, fresh = fresh, reused

    assert (first.status_id, reused.status_id, fresh.status_id) == ("succeeded",) * 3
    stats = sandbox.stats()
    # The opted-out upload was submitted once; the reused one never reached the sandbox: every
    # request after the first job's is the opted-out job's.
    assert str(reused.pk) not in " ".join(stats["posts_by_key"])
    assert stats["created_by_key"][f"{fresh.pk}:1"] == 1
    assert stats["requests"]["POST"] == calls_after_first["POST"] + 1
    assert (reused.reused_from_job, reused.reused_from_attempt) == (first.pk, 1)
    assert (fresh.reused_from_job, reused.external_job_id) == (None, "")
    assert_no_duplicate_submissions(sandbox, [first, reused, fresh])
    assert (
        ExtractionResult.objects.get(job=reused).load_payload()
        == ExtractionResult.objects.get(job=first).load_payload()
    )
    usage = {row.job_id: row for row in UsageRecord.objects.all()}
    assert (usage[first.pk].pages, usage[fresh.pk].pages) == (3, 3)
    assert (usage[reused.pk].pages, usage[reused.pk].pages_saved) == (0, 3)
    assert usage[reused.pk].counted_by == UsageCountedBy.REUSED


def test_two_identical_uploads_at_once_reach_the_extractor_once(stack, sandbox, extractor):
    extractor.reuse_window = timedelta(hours=1)
    extractor.save()
    actor = Actor("api", UserFactory())
    posts_before = sandbox.stats()["requests"].get("POST", 0)

    jobs = wait_for_terminal(
        [upload(extractor, actor, "one"), upload(extractor, actor, "two")], 60, stack
    )

    assert [job.status_id for job in jobs] == ["succeeded"] * 2
    extracted, reused = sorted(jobs, key=lambda job: job.reused_from_job is not None)
    assert (extracted.reused_from_job, reused.reused_from_job) == (None, extracted.pk)
    assert sandbox.stats()["requests"]["POST"] == posts_before + 1
    assert_no_duplicate_submissions(sandbox, [extracted])
