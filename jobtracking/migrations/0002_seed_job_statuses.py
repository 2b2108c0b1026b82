from django.db import migrations

# The statuses as they were when this migration was written. A migration never reads the live
# declarations (`jobtracking.states`): a status added later would reach only the databases built
# after it, never one that had run this already. Each new status inserts its own row, as it is
# then, in the migration that adds it.
STATUSES = (
    ("pending", "Pending", False, "Created or requeued, waiting to be submitted"),
    ("submitting", "Submitting", False, "A worker holds a lease and is sending it to the extractor"),
    ("submitted", "Submitted", False, "The extractor accepted it, not yet running"),
    ("processing", "Processing", False, "The extractor reports it running"),
    ("succeeded", "Succeeded", True, "The extractor finished and the result is stored"),
    ("failed", "Failed", True, "Permanent error, or retries or error budget exhausted"),
    ("timed_out", "Timed out", True, "The job's deadline passed before the extractor finished"),
    ("cancelled", "Cancelled", True, "Cancelled by a person or client, or by the extractor"),
)


def seed_statuses(apps, schema_editor):
    JobStatus = apps.get_model("jobtracking", "JobStatus")
    for position, (code, label, terminal, description) in enumerate(STATUSES):
        JobStatus.objects.update_or_create(
            code=code,
            defaults={
                "label": label,
                "terminal": terminal,
                "description": description,
                "position": position,
            },
        )


class Migration(migrations.Migration):
    dependencies = [("jobtracking", "0001_initial")]

    operations = [migrations.RunPython(seed_statuses, migrations.RunPython.noop)]
