from django.db import migrations, models

# Room left in each page of deliveries for the new versions of its rows: a claim (and the
# pruning that follows) then stays on the row's page, as a heap-only update.
FILLFACTOR = 70


def set_fillfactor(apps, schema_editor, value: str) -> None:
    if schema_editor.connection.vendor == "postgresql":
        table = schema_editor.quote_name(
            apps.get_model("jobtracking", "WebhookDelivery")._meta.db_table
        )
        schema_editor.execute(f"ALTER TABLE {table} {value}")


class Migration(migrations.Migration):
    dependencies = [
        ("jobtracking", "0018_batches"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookdelivery",
            name="claimed_until",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(
            lambda apps, editor: set_fillfactor(apps, editor, f"SET (fillfactor = {FILLFACTOR})"),
            lambda apps, editor: set_fillfactor(apps, editor, "RESET (fillfactor)"),
        ),
    ]
