from django.core.management.base import BaseCommand

from jobtracking.models import WebhookDelivery
from jobtracking.webhooks import delivery_retry


class Command(BaseCommand):
    help = "Give dead webhook deliveries a fresh retry schedule, due now."

    def add_arguments(self, parser):
        parser.add_argument("--subscription", type=int, help="Only this subscription's.")

    def handle(self, *args, **options):
        deliveries = WebhookDelivery.objects.all()
        if options["subscription"]:
            deliveries = deliveries.filter(subscription_id=options["subscription"])
        self.stdout.write(f"Retrying {delivery_retry(queryset=deliveries)} dead delivery(ies).")
