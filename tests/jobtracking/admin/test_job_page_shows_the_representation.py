"""Every field clients see of a job (`JobRepresentation`) is on the admin's job page, in its
fieldsets or its summary, or listed here with the reason it is not: a field added to the API
alone fails this test."""

from django.contrib import admin
from django.utils import timezone

from jobtracking.admin.job_page import summary
from jobtracking.models import ExtractionJob
from jobtracking.representation import job_representation
from tests.factories import BatchFactory, ExtractionJobFactory

# Shown under another name: the representation's key, the page's fields or summary labels.
SHOWN_AS = {
    "has_upload": {"upload_link"},
    "error": {"error_code", "error_message"},
    "batch": {"Batch"},
    "durations": {"Turnaround", "Running for"},
}
NOT_SHOWN = {
    "links": "the API's own addresses; the page links to the job's history, result and batch",
}


def shown_on_the_page() -> set[str]:
    """The fields of the job page's fieldsets and the labels of its summary."""
    fieldsets = admin.site.get_model_admin(ExtractionJob).fieldsets
    return {name for _, options in fieldsets for name in options["fields"]} | set(_labels())


def _labels() -> list[str]:
    job = ExtractionJobFactory(batch=BatchFactory(), error_code="timeout")
    ended = ExtractionJobFactory(completed_at=timezone.now())
    return [label for one in (job, ended) for label, _ in summary(one, timezone.now())]


def missing(keys, shown: set[str]) -> set[str]:
    return {
        key
        for key in keys
        if key not in shown and key not in NOT_SHOWN and not SHOWN_AS.get(key, set()) & shown
    }


def test_every_field_clients_see_is_on_the_job_page_or_listed(db):
    keys = job_representation(ExtractionJobFactory()).keys()
    shown = shown_on_the_page()
    assert missing(keys, shown) == set()
    # Not blind: a field the representation gained alone is named, and so is one the page lost.
    assert missing([*keys, "grant_id"], shown) == {"grant_id"}
    assert missing(keys, shown - {"metadata"}) == {"metadata"}
    assert set(NOT_SHOWN) <= keys and set(SHOWN_AS) <= keys
