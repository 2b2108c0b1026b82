"""The migration that makes "every event type" a choice of its own gives it to the subscriptions
saved with no event types (they asked for every event, and keep receiving every one), and
leaves those that listed theirs as they were."""

import importlib

import pytest
from django.apps import apps
from django.db import connection
from django.db.models import Value
from django.db.models.fields.json import JSONField

from jobtracking.models import WebhookSubscription
from tests.factories import WebhookSubscriptionFactory

pytestmark = pytest.mark.django_db

all_for_empty = importlib.import_module(
    "jobtracking.migrations.0021_subscription_all_event_types"
).all_for_empty
CONSTRAINT = "subscription_all_or_listed_event_types"


def test_subscriptions_without_event_types_get_every_type_and_listed_ones_keep_theirs():
    # As before the migration: the rule is lifted (in this test's transaction) to write them.
    (constraint,) = [c for c in WebhookSubscription._meta.constraints if c.name == CONSTRAINT]
    with connection.schema_editor() as editor:
        editor.remove_constraint(WebhookSubscription, constraint)
    empty = WebhookSubscriptionFactory(event_types=[], all_event_types=False)
    null = WebhookSubscriptionFactory(all_event_types=False)
    WebhookSubscription.objects.filter(pk=null.pk).update(event_types=Value(None, JSONField()))
    listed = WebhookSubscriptionFactory(event_types=["job.failed"], all_event_types=False)

    all_for_empty(apps, None)

    stored = {s.pk: (s.event_types, s.all_event_types) for s in WebhookSubscription.objects.all()}
    assert stored == {
        empty.pk: ([], True),
        null.pk: ([], True),
        listed.pk: (["job.failed"], False),
    }
    for subscription in WebhookSubscription.objects.all():
        constraint.validate(WebhookSubscription, subscription)  # the rule holds for each
