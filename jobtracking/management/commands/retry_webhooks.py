from django.core.management.base import BaseCommand, CommandError

from jobtracking.models import WebhookDelivery, WebhookSubscription
from jobtracking.services.deliveries import delivery_retry


class Command(BaseCommand):
    help = "Give dead webhook deliveries a fresh retry schedule, due now."

    def add_arguments(self, parser):
        parser.add_argument("--subscription", type=int, help="Only this subscription's.")

    def handle(self, *args, **options):
        deliveries = WebhookDelivery.objects.all()
        if (chosen := options["subscription"]) is not None:
            if not WebhookSubscription.objects.filter(pk=chosen).exists():
                known = WebhookSubscription.objects.order_by("pk").values_list("pk", "url")
                listed = ", ".join(f"{pk} ({url})" for pk, url in known) or "none"
                raise CommandError(f"No subscription {chosen}; the subscriptions are: {listed}.")
            deliveries = deliveries.filter(subscription_id=chosen)
        self.stdout.write(f"Retrying {delivery_retry(queryset=deliveries)} dead delivery(ies).")
