# "Every event type" becomes a choice of its own: an empty list meant it, so that a new event
# type reached every subscription that listed none, asked for or not.

from django.db import migrations, models


def all_for_empty(apps, schema_editor):
    """A subscription saved with no event types asked for every event when it was saved: it
    keeps receiving every one, now because it says so (`all_event_types`)."""
    subscription = apps.get_model("jobtracking", "WebhookSubscription")
    empty = models.Q(event_types=[]) | models.Q(event_types=None)  # None: JSON null
    subscription.objects.filter(empty).update(all_event_types=True, event_types=[])


class Migration(migrations.Migration):

    dependencies = [
        ('jobtracking', '0020_blast_radius'),
    ]

    operations = [
        migrations.AddField(
            model_name='webhooksubscription',
            name='all_event_types',
            field=models.BooleanField(default=False, help_text='Receive every event type, including ones added later.'),
        ),
        migrations.AlterField(
            model_name='webhooksubscription',
            name='event_types',
            field=models.JSONField(blank=True, default=list, help_text='The event types to receive (unless all of them).'),
        ),
        # Reversed, nothing to undo: without the flag an empty list means every type again.
        migrations.RunPython(all_for_empty, migrations.RunPython.noop, elidable=False),
        migrations.AddConstraint(
            model_name='webhooksubscription',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('all_event_types', True), ('event_types', [])), models.Q(('all_event_types', False), models.Q(('event_types', []), _negated=True)), _connector='OR'), name='subscription_all_or_listed_event_types', violation_error_message='Choose the event types to receive, or all event types (all_event_types: every type, including ones added later), not both.'),
        ),
    ]
