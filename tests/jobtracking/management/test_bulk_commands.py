"""requeue_jobs, cancel_jobs, purge_jobs, retry_webhooks, reap_stuck_jobs, setup_schedules."""

import io
import warnings
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError
from django.utils import timezone
from django_q.models import Schedule

from jobtracking.models import (
    DeliveryState,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    WebhookDelivery,
)
from jobtracking.services import Actor, job_cancel, job_requeue
from tests.factories import (
    ExtractionJobFactory,
    ExtractionResultFactory,
    ExtractorFactory,
    JobEventFactory,
    WebhookDeliveryFactory,
)

pytestmark = pytest.mark.django_db


def run(name: str, *args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(name, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def fleet():
    sandbox, azure = ExtractorFactory(slug="sandbox"), ExtractorFactory(slug="azure")
    now = timezone.now()
    return {
        "failed_sandbox": ExtractionJobFactory(extractor=sandbox, failed=True),
        "failed_azure": ExtractionJobFactory(
            extractor=azure, failed=True, error_code="extractor_unavailable"
        ),
        "old_failed": ExtractionJobFactory(
            extractor=sandbox, failed=True, created_at=now - timedelta(days=10)
        ),
        "succeeded": ExtractionJobFactory(extractor=sandbox, succeeded=True),
        "pending": ExtractionJobFactory(extractor=sandbox),
        "processing": ExtractionJobFactory(extractor=azure, processing=True),
    }


def statuses(fleet) -> dict[str, str]:
    return {name: ExtractionJob.objects.get(pk=job.pk).status_id for name, job in fleet.items()}


@pytest.mark.parametrize(
    ("args", "requeued"),
    [
        (["--status", "failed"], {"failed_sandbox", "failed_azure", "old_failed"}),
        (["--status", "failed", "--extractor", "azure"], {"failed_azure"}),
        (["--error-code", "extractor_unavailable"], {"failed_azure"}),
        (["--status", "failed", "--created-before", "{5_days_ago}"], {"old_failed"}),
        (
            ["--status", "failed", "--created-after", "{5_days_ago}"],
            {"failed_sandbox", "failed_azure"},
        ),
        (["--ids", "{failed_sandbox}"], {"failed_sandbox"}),
    ],
)
def test_requeue_jobs_filters(fleet, args, requeued):
    five_days_ago = (timezone.now() - timedelta(days=5)).isoformat()
    args = [
        a.format(**{"5_days_ago": five_days_ago}, failed_sandbox=fleet["failed_sandbox"].pk)
        for a in args
    ]
    out, _ = run("requeue_jobs", *args, "--reason", "extractor fixed")
    moved = {name for name, status in statuses(fleet).items() if status == "pending"} - {"pending"}
    assert moved == requeued
    assert f"{len(moved)} changed" in out
    change = JobStatusChange.objects.filter(to_status="pending", from_status="failed").first()
    assert (change.actor_type, change.reason) == ("command", "extractor fixed")
    assert change.details["os_user"]


def test_requeue_jobs_limit_stops_after_that_many(fleet):
    out, _ = run("requeue_jobs", "--status", "failed", "--limit", "1")
    failed = {"failed_sandbox", "failed_azure", "old_failed"}
    assert sum(statuses(fleet)[name] == "pending" for name in failed) == 1
    assert "1 changed" in out


def test_requeue_jobs_from_an_ids_file_and_stdin(fleet, tmp_path, monkeypatch):
    path = tmp_path / "ids.txt"
    path.write_text(f"{fleet['failed_sandbox'].pk}\n\n{fleet['failed_azure'].pk}\n")
    run("requeue_jobs", "--ids-file", str(path))
    assert statuses(fleet)["failed_sandbox"] == statuses(fleet)["failed_azure"] == "pending"
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{fleet['old_failed'].pk}\n"))
    run("requeue_jobs", "--ids-file", "-")
    assert statuses(fleet)["old_failed"] == "pending"


def test_requeue_jobs_skips_succeeded_without_force_and_active_jobs(fleet):
    ids = [str(fleet[name].pk) for name in ("succeeded", "pending", "failed_sandbox")]
    out, _ = run("requeue_jobs", "--ids", *ids)
    assert "1 changed, 2 skipped (1 pending is still active; 1 succeeded needs --force)" in out
    assert statuses(fleet)["succeeded"] == "succeeded"
    out, _ = run("requeue_jobs", "--ids", ids[0], "--force")
    assert "1 changed" in out and statuses(fleet)["succeeded"] == "pending"


def test_requeue_jobs_dry_run_changes_nothing(fleet):
    out, _ = run("requeue_jobs", "--status", "failed", "--dry-run")
    assert "3 job(s) would be requeued" in out and str(fleet["old_failed"].pk) in out
    assert statuses(fleet)["failed_sandbox"] == "failed"
    assert not JobStatusChange.objects.exists()


def test_requeue_jobs_dry_run_with_a_limit_lists_only_what_it_would_requeue(fleet):
    out, _ = run("requeue_jobs", "--status", "failed", "--dry-run", "--limit", "2")
    assert "2 job(s) would be requeued" in out
    listed = [line for line in out.splitlines() if line.startswith("  ")]
    assert len(listed) == 2


def test_bulk_commands_name_what_is_wrong_in_their_input(fleet):
    with pytest.raises(
        CommandError, match="No extractor 'nope'; the extractors are: azure, sandbox"
    ):
        run("requeue_jobs", "--extractor", "nope")
    good = str(fleet["failed_sandbox"].pk)
    with pytest.raises(CommandError, match=r"Not a job id \(2 of 3\): 'x-1', 'x-2'"):
        run("requeue_jobs", "--ids", good, "x-1", "x-2")


@pytest.mark.parametrize(
    ("command", "inapplicable"),
    [("purge_jobs", "pending"), ("requeue_jobs", "processing"), ("cancel_jobs", "succeeded")],
)
def test_commands_offer_only_the_statuses_they_can_act_on(command, inapplicable):
    with pytest.raises(CommandError, match=f"invalid choice: '{inapplicable}'"):
        run(command, "--status", inapplicable)


def test_requeue_jobs_refuses_to_run_without_a_filter(fleet):
    with pytest.raises(CommandError, match="at least one filter"):
        run("requeue_jobs")


def test_requeue_jobs_refuses_bad_input(fleet):
    with pytest.raises(CommandError, match="Not a job id"):
        run("requeue_jobs", "--ids", "nope")
    with pytest.raises(CommandError, match="ISO"):
        run("requeue_jobs", "--status", "failed", "--created-after", "yesterday")


def test_requeue_jobs_interrupted_then_run_again_finishes_the_rest(fleet, monkeypatch):
    from jobtracking.management import selection

    calls = {"n": 0}
    real = selection.Progress.advance

    def interrupt_after_first_batch(self, count):
        real(self, count)
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(selection.Progress, "advance", interrupt_after_first_batch)
    with pytest.raises(KeyboardInterrupt):
        run("requeue_jobs", "--status", "failed", "--batch-size", "1")
    assert sum(s == "pending" for s in statuses(fleet).values()) == 2  # one requeued + "pending"
    out, _ = run("requeue_jobs", "--status", "failed", "--batch-size", "1")
    assert "2 changed, 0 skipped, 0 failed" in out
    assert JobStatusChange.objects.filter(from_status="failed", to_status="pending").count() == 3


def test_requeue_jobs_reports_failures_and_exits_non_zero(fleet):
    ExtractionJobFactory(
        extractor=fleet["failed_sandbox"].extractor, file_id=fleet["failed_sandbox"].file_id
    )
    with pytest.raises(CommandError, match="1 job"):
        run("requeue_jobs", "--ids", str(fleet["failed_sandbox"].pk))


def test_cancel_jobs_cancels_active_jobs_and_skips_the_rest(fleet):
    out, _ = run("cancel_jobs", "--extractor", "azure", "--reason", "vendor outage")
    assert "1 changed, 1 skipped (1 failed has already ended)" in out
    assert statuses(fleet)["processing"] == "cancelled"
    assert JobStatusChange.objects.get(to_status="cancelled").reason == "vendor outage"


def test_purge_jobs_keeps_what_retention_says(settings):
    settings.JOBS_RETENTION_DAYS = {"succeeded": 30, "failed": 90, "timed_out": 90, "cancelled": 30}
    now = timezone.now()
    old_ok = ExtractionJobFactory(succeeded=True, completed_at=now - timedelta(days=31))
    young_ok = ExtractionJobFactory(succeeded=True, completed_at=now - timedelta(days=29))
    failed_60 = ExtractionJobFactory(failed=True, completed_at=now - timedelta(days=60))
    failed_91 = ExtractionJobFactory(failed=True, completed_at=now - timedelta(days=91))
    active = ExtractionJobFactory(created_at=now - timedelta(days=400))
    ExtractionResultFactory(job=old_ok)
    JobStatusChange.objects.create(
        job=old_ok, to_status_id="pending", attempt=1, actor_type="system"
    )
    delivery = WebhookDeliveryFactory(event=JobEventFactory(job=old_ok))

    out, _ = run("purge_jobs", "--dry-run")
    assert "2 job(s) would be purged" in out
    assert ExtractionJob.objects.count() == 5

    out, _ = run("purge_jobs", "--batch-size", "1")
    assert "Purged 2 job(s)" in out
    remaining = set(ExtractionJob.objects.values_list("pk", flat=True))
    assert remaining == {young_ok.pk, failed_60.pk, active.pk}
    assert not ExtractionResult.objects.filter(job_id=old_ok.pk).exists()
    assert not JobStatusChange.objects.filter(job_id=old_ok.pk).exists()
    assert not JobEvent.objects.filter(job_id=old_ok.pk).exists()
    assert not WebhookDelivery.objects.filter(pk=delivery.pk).exists()
    assert failed_91.pk not in remaining


def test_purge_jobs_filters_narrow_the_selection(settings):
    settings.JOBS_RETENTION_DAYS = {"succeeded": 1, "failed": 1, "timed_out": 1, "cancelled": 1}
    old = timezone.now() - timedelta(days=5)
    keep = ExtractionJobFactory(failed=True, completed_at=old)
    drop = ExtractionJobFactory(succeeded=True, completed_at=old)
    run("purge_jobs", "--status", "succeeded")
    assert set(ExtractionJob.objects.values_list("pk", flat=True)) == {keep.pk}
    assert not ExtractionJob.objects.filter(pk=drop.pk).exists()


def test_retry_webhooks_revives_dead_deliveries():
    dead = WebhookDeliveryFactory(state=DeliveryState.DEAD, attempts=8, next_attempt_at=None)
    out, _ = run("retry_webhooks")
    dead.refresh_from_db()
    assert "Retrying 1" in out and (dead.state, dead.attempts) == ("pending", 0)


def test_retry_webhooks_for_one_subscription_and_an_unknown_one():
    dead = WebhookDeliveryFactory(state=DeliveryState.DEAD, attempts=8, next_attempt_at=None)
    other = WebhookDeliveryFactory(state=DeliveryState.DEAD, attempts=8, next_attempt_at=None)
    out, _ = run("retry_webhooks", "--subscription", str(dead.subscription_id))
    assert "Retrying 1" in out
    assert WebhookDelivery.objects.get(pk=other.pk).state == DeliveryState.DEAD
    url = dead.subscription.url
    with pytest.raises(
        CommandError,
        match=rf"No subscription 999; the subscriptions are: {dead.subscription_id} \({url}\)",
    ):
        run("retry_webhooks", "--subscription", "999")


def test_reap_stuck_jobs_command_reports():
    ExtractionJobFactory(processing=True, deadline_at=timezone.now() - timedelta(seconds=1))
    out, _ = run("reap_stuck_jobs")
    assert "Timed out 1" in out


def test_setup_schedules_is_idempotent():
    run("setup_schedules")
    run("setup_schedules")
    names = set(Schedule.objects.values_list("name", flat=True))
    assert {"reap stuck jobs", "purge jobs past retention"} <= names
    assert Schedule.objects.count() == len(names)


def test_job_cancel_via_command_actor_keeps_user_none():
    job = ExtractionJobFactory()
    job_cancel(job_id=job.pk, actor=Actor.command())
    assert JobStatusChange.objects.get(job=job).actor is None


@pytest.mark.parametrize(
    ("names", "force"),
    [
        (["succeeded"], False),
        (["succeeded"], True),
        (["succeeded", "pending", "failed_sandbox", "processing"], False),
        (["failed_sandbox", "old_failed"], False),
    ],
)
def test_requeue_jobs_dry_run_and_real_run_agree(fleet, names, force):
    args = ["--ids", *(str(fleet[name].pk) for name in names)] + (["--force"] if force else [])
    dry, _ = run("requeue_jobs", *args, "--dry-run")
    would = int(dry.split("Dry run: ")[1].split(" job(s)")[0])
    skipped_line = next((line for line in dry.splitlines() if line.startswith("Would be")), "")
    out, _ = run("requeue_jobs", *args)
    assert f"Requeued: {would} changed, " in out
    assert skipped_line.removeprefix("Would be ").rstrip(".") in out
    assert sum(statuses(fleet)[name] == "pending" for name in names) - names.count("pending") == (
        would
    )


def test_requeue_jobs_names_why_it_skips_a_succeeded_job(fleet):
    args = ("--ids", str(fleet["succeeded"].pk))
    dry, _ = run("requeue_jobs", *args, "--dry-run")
    assert "Dry run: 0 job(s) would be requeued." in dry
    assert "Would be 1 skipped (1 succeeded needs --force)." in dry
    out, _ = run("requeue_jobs", *args)
    assert out.strip() == "Requeued: 0 changed, 1 skipped (1 succeeded needs --force), 0 failed."
    assert statuses(fleet)["succeeded"] == "succeeded"


def test_requeue_jobs_leaves_a_job_in_submission_alone(fleet):
    submitting = ExtractionJobFactory(submitting=True)
    out, _ = run("requeue_jobs", "--ids", str(submitting.pk))
    assert "0 changed, 1 skipped (1 submitting is still active)" in out
    job = ExtractionJob.objects.get(pk=submitting.pk)
    assert (job.status_id, job.attempt) == ("submitting", 1)


def test_requeue_jobs_counts_a_job_requeued_meanwhile_as_moved_on(fleet, monkeypatch):
    from jobtracking.management.commands import requeue_jobs

    def someone_else_first(**kwargs):
        job_requeue(job_id=kwargs["job_id"], actor=Actor.system())
        return job_requeue(**kwargs)

    monkeypatch.setattr(requeue_jobs, "job_requeue", someone_else_first)
    out, _ = run("requeue_jobs", "--ids", str(fleet["failed_sandbox"].pk))
    assert "0 changed, 1 skipped (1 moved on meanwhile), 0 failed" in out


def test_requeue_jobs_reads_a_date_without_a_zone_in_time_zone_without_warning(settings):
    settings.TIME_ZONE = "America/Sao_Paulo"  # UTC-3
    at = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)  # 23:00 on 30 November in São Paulo
    before = ExtractionJobFactory(failed=True, created_at=at)
    after = ExtractionJobFactory(failed=True, created_at=at + timedelta(hours=2))  # 1 December
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, _ = run("requeue_jobs", "--created-before", "2026-12-01", "--dry-run")
        run("requeue_jobs", "--created-before", "2026-12-01T00:00:00")
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], caught
    assert "1 job(s) would be requeued" in out and str(before.pk) in out
    assert ExtractionJob.objects.get(pk=before.pk).status_id == "pending"
    assert ExtractionJob.objects.get(pk=after.pk).status_id == "failed"


def test_requeue_jobs_help_names_the_time_zone_of_dates_without_one(settings):
    settings.TIME_ZONE = "Europe/Lisbon"
    parser = load_command_class("jobtracking", "requeue_jobs").create_parser("manage.py", "x")
    assert "Europe/Lisbon" in " ".join(parser.format_help().split())


@pytest.mark.parametrize(
    "args",
    [
        ("--completed-before", "2026-12-01"),
        ("--completed-after", "2026-12-01"),
        ("--error-code", "extraction_failed"),
    ],
)
def test_cancel_jobs_offers_no_filter_that_only_ended_jobs_match(args):
    with pytest.raises(CommandError, match="unrecognized arguments"):
        run("cancel_jobs", *args)


def test_retry_webhooks_dry_run_reports_and_changes_nothing():
    dead = WebhookDeliveryFactory(state=DeliveryState.DEAD, attempts=8, next_attempt_at=None)
    WebhookDeliveryFactory(state=DeliveryState.DELIVERED)
    out, _ = run("retry_webhooks", "--dry-run")
    assert "Dry run: 1 dead delivery(ies) would be retried. They are:" in out
    assert f"delivery {dead.pk} " in out and "8 attempt(s)" in out
    dead.refresh_from_db()
    assert (dead.state, dead.attempts) == (DeliveryState.DEAD, 8)
    out, _ = run("retry_webhooks", "--dry-run", "--subscription", str(dead.subscription_id))
    assert "1 dead delivery(ies) would be retried" in out
