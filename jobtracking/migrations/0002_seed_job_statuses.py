from django.db import migrations

from jobtracking.states import STATUSES


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
