"""Webhook subscriptions' writes: an API client's endpoints, and the secret rotation the admin
and the API share. Each is checked by the model's `clean` (the URL guard, known event types,
the listed types or all of them), as the admin's form checks it."""

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from jobtracking.models import WebhookSubscription

# What a client may change on its own endpoint.
EDITABLE = ("url", "description", "event_types", "all_event_types", "active", "all_jobs")


def subscription_create(*, owner: AbstractBaseUser, **fields: Any) -> WebhookSubscription:
    """A new subscription of `owner`'s, active unless said otherwise. Raises Django's
    `ValidationError` for an unsafe URL or an unknown event type; saves nothing then."""
    subscription = WebhookSubscription(created_by=owner, **_editable(fields))
    subscription.full_clean()
    subscription.save()
    return subscription


def subscription_update(*, subscription: WebhookSubscription, **fields: Any) -> None:
    """Change the given fields (the others as they are), checked as on creation."""
    for name, value in _editable(fields).items():
        setattr(subscription, name, value)
    subscription.full_clean()
    subscription.save(update_fields=[*fields, "updated_at"])


def subscription_delete(*, subscription: WebhookSubscription) -> None:
    """Delete it with its deliveries and their attempts: no more events go to it."""
    with transaction.atomic():
        subscription.delete()


def subscription_rotate_secret(subscription: WebhookSubscription) -> None:
    """A new signing secret (derived from the next `secret_version`). Deliveries are signed with
    the old one too for `WEBHOOK_SECRET_GRACE_HOURS` (`webhooks.sending.subscription_secrets`),
    so that the receiver switches without a gap; a second rotation within that time ends the
    first one's grace."""
    subscription.secret_version += 1
    subscription.secret_rotated_at = timezone.now()
    subscription.save(update_fields=["secret_version", "secret_rotated_at", "updated_at"])


def _editable(fields: dict[str, Any]) -> dict[str, Any]:
    if unknown := fields.keys() - set(EDITABLE):
        raise TypeError(f"Not editable: {sorted(unknown)}")
    return fields


def subscriptions_end_with_their_creator(sender, instance, **kwargs) -> None:
    """Before a user is deleted (a `pre_delete` receiver, `apps.py`): their subscriptions stop.
    `created_by` is then set to null, which would otherwise read as an operator's subscription
    (`deliveries.reaches_all_sql`) and keep an `all_jobs` one receiving every client's events.
    Their rows and deliveries stay, for the record."""
    WebhookSubscription.objects.filter(created_by=instance).update(
        active=False, all_jobs=False, updated_at=timezone.now()
    )
