from django.db import migrations, models
from django.db.models import OuterRef, Subquery

TERMINAL = ["succeeded", "failed", "timed_out", "cancelled"]


def backfill(apps, schema_editor):
    """A requeued job's attempt began at its requeue: the audit row that opened the attempt."""
    ExtractionJob = apps.get_model("jobtracking", "ExtractionJob")
    JobStatusChange = apps.get_model("jobtracking", "JobStatusChange")
    requeue = JobStatusChange.objects.filter(
        job=OuterRef("pk"),
        attempt=OuterRef("attempt"),
        to_status="pending",
        from_status__in=TERMINAL,
    ).order_by("-changed_at")
    ExtractionJob.objects.filter(attempt__gt=1).update(
        requeued_at=Subquery(requeue.values("changed_at")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("jobtracking", "0015_token_expiry"),
    ]

    operations = [
        migrations.AddField(
            model_name="extractionjob",
            name="requeued_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
