"""Who receives an event, on both paths of the fan-out (the ORM's, for transitions and
batches, and the creation statement's): a subscription with `all_jobs` reaches every client's
jobs only while its creator holds the view-all permission, as Django's own `has_perm` reads it;
a type added later reaches only the subscriptions that chose every type."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.utils import timezone

from jobtracking.models import ExtractionJob, JobEvent, WebhookDelivery
from jobtracking.selectors import VIEW_ALL
from jobtracking.services import Actor, job_cancel
from jobtracking.services.deliveries import (
    deliveries_fan_out,
    fan_out_statement,
    fan_out_values,
)
from tests.factories import (
    ExtractionJobFactory,
    JobEventFactory,
    UserFactory,
    WebhookSubscriptionFactory,
    api_job,
)

pytestmark = pytest.mark.django_db


def view_all() -> Permission:
    app_label, codename = VIEW_ALL.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


def holder(how: str):
    """A user who holds view-all `how`, or held it, or never did."""
    user = UserFactory(is_superuser=how == "superuser")
    if how in ("directly", "revoked", "inactive"):
        user.user_permissions.add(view_all())
    if how == "by a group":
        group = Group.objects.create(name="auditors")
        group.permissions.add(view_all())
        user.groups.add(group)
    return user


def after_saving(user, how: str) -> None:
    """What happened to the creator since the subscription was saved."""
    if how == "revoked":
        user.user_permissions.remove(view_all())
    if how == "inactive":
        user.is_active = False
        user.save(update_fields=["is_active"])


@pytest.mark.parametrize(
    ("how", "reaches_all"),
    [
        ("directly", True),
        ("by a group", True),
        ("superuser", True),
        ("revoked", False),
        ("inactive", False),
        ("never", False),
        ("no creator", True),  # an operator's (seed_demo, the shell): as it was saved
    ],
)
def test_all_jobs_reaches_every_client_only_while_its_creator_may_see_them(how, reaches_all):
    creator = None if how == "no creator" else holder(how)
    subscription = WebhookSubscriptionFactory(created_by=creator, all_jobs=True)
    if creator is not None:
        after_saving(creator, how)
        fresh = type(creator).objects.get(pk=creator.pk)  # no permission cache
        assert fresh.has_perm(VIEW_ALL) == reaches_all  # the same rule as Django's
    other = UserFactory()
    own = api_job(file_id="own", user=creator)  # `job.created`: the creation statement
    foreign = api_job(file_id="foreign", user=other)
    for job in (own, foreign):
        job_cancel(job_id=job.pk, actor=Actor("api", job.requested_by))  # the ORM's path

    received = set(
        WebhookDelivery.objects.filter(subscription=subscription).values_list(
            "event__job", "event__type"
        )
    )
    reached = [own, foreign] if reaches_all else [own]
    assert received == {
        (job.pk, event) for job in reached for event in ("job.created", "job.cancelled")
    }


def test_without_all_jobs_even_a_superuser_receives_only_their_own():
    creator = holder("superuser")
    subscription = WebhookSubscriptionFactory(created_by=creator, all_jobs=False)
    own, foreign = api_job(file_id="own", user=creator), api_job(file_id="foreign")
    job_cancel(job_id=foreign.pk, actor=Actor("api"))
    received = WebhookDelivery.objects.filter(subscription=subscription)
    assert set(received.values_list("event__job", flat=True)) == {own.pk}


def orm_fan_out(event: JobEvent) -> set[int]:
    """The subscriptions `deliveries_fan_out` (transitions, batches) delivers `event` to."""
    deliveries_fan_out([event])
    return set(WebhookDelivery.objects.filter(event=event).values_list("subscription", flat=True))


def statement_fan_out(event: JobEvent) -> set[int]:
    """The subscriptions the creation statement's fan-out (`fan_out_statement`) delivers
    `event` to: the statement fed this stored event, as its CTEs feed it the new ones."""
    statement = (
        f"WITH e AS (SELECT id, type, job_id FROM {JobEvent._meta.db_table} WHERE id = %s), "
        f"j AS (SELECT id, requested_by_id FROM {ExtractionJob._meta.db_table} WHERE id = %s), "
        f"d AS ({fan_out_statement('e', 'j')}) SELECT id FROM d"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [event.pk, event.job_id, fan_out_values(timezone.now())])
        made = [row[0] for row in cursor.fetchall()]
    return set(WebhookDelivery.objects.filter(pk__in=made).values_list("subscription", flat=True))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the creation statement")
@pytest.mark.parametrize("fan_out", [orm_fan_out, statement_fan_out])
def test_a_type_added_later_reaches_only_the_subscriptions_that_chose_every_type(fan_out):
    # `job.progressed` stands for a type added after the subscriptions were saved: those that
    # listed their types did not ask for it.
    every = WebhookSubscriptionFactory(all_event_types=True, all_jobs=True)
    listed = WebhookSubscriptionFactory(event_types=["job.failed"], all_jobs=True)
    job = ExtractionJobFactory()
    assert fan_out(JobEventFactory(job=job, type="job.progressed")) == {every.pk}
    assert fan_out(JobEventFactory(job=job, type="job.failed")) == {every.pk, listed.pk}


@pytest.mark.parametrize("fan_out", [orm_fan_out, statement_fan_out])
def test_a_deleted_clients_all_jobs_subscription_stops_receiving(fan_out):
    client = UserFactory(username="leaving")
    client.user_permissions.add(Permission.objects.get(codename="view_all_extractionjobs"))
    subscription = WebhookSubscriptionFactory(created_by=client, all_jobs=True)
    job = ExtractionJobFactory()
    assert fan_out(JobEventFactory(job=job, type="job.failed")) == {subscription.pk}
    client.delete()
    subscription.refresh_from_db()
    assert (subscription.created_by_id, subscription.active, subscription.all_jobs) == (
        None,
        False,
        False,
    )
    assert fan_out(JobEventFactory(job=job, type="job.failed")) == set()
