"""Webhook subscriptions' writes beyond the admin's form."""

from jobtracking.models import WebhookSubscription


def subscription_rotate_secret(subscription: WebhookSubscription) -> None:
    """A new signing secret (derived from the next `secret_version`): the old one stops
    verifying at once."""
    subscription.secret_version += 1
    subscription.save(update_fields=["secret_version", "updated_at"])
