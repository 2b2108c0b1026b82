from django.core.management.base import BaseCommand, CommandError

from jobtracking.management.selection import SAMPLE_SIZE
from jobtracking.models import DeliveryState, WebhookDelivery, WebhookSubscription
from jobtracking.services.deliveries import delivery_retry


class Command(BaseCommand):
    help = "Give dead webhook deliveries a fresh retry schedule, due now."

    def add_arguments(self, parser):
        parser.add_argument(
            "--subscription", type=int, help="Only this subscription's (its id in the admin)."
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Count the dead deliveries and show a sample; change nothing.",
        )

    def handle(self, *args, **options):
        # The service retries only dead deliveries; the dry run counts the same ones.
        dead = WebhookDelivery.objects.filter(state=DeliveryState.DEAD)
        if (chosen := options["subscription"]) is not None:
            if not WebhookSubscription.objects.filter(pk=chosen).exists():
                known = WebhookSubscription.objects.order_by("pk").values_list("pk", "url")
                listed = ", ".join(f"{pk} ({url})" for pk, url in known) or "none"
                raise CommandError(f"No subscription {chosen}; the subscriptions are: {listed}.")
            dead = dead.filter(subscription_id=chosen)
        if options["dry_run"]:
            self.show_sample(dead)
            return
        self.stdout.write(f"Retrying {delivery_retry(queryset=dead)} dead delivery(ies).")

    def show_sample(self, dead) -> None:
        total = dead.count()
        shown = min(total, SAMPLE_SIZE)
        self.stdout.write(
            f"Dry run: {total} dead delivery(ies) would be retried."
            + (f" The first {shown}:" if shown < total else " They are:" if total else "")
        )
        rows = dead.order_by("pk").values_list(
            "pk", "subscription_id", "event__type", "event__job_id", "attempts", "last_error"
        )
        for pk, subscription, event_type, job_id, attempts, error in rows[:shown]:
            self.stdout.write(
                f"  delivery {pk}  subscription {subscription}  {event_type}  job {job_id}  "
                f"{attempts} attempt(s)  {error[:80] or '—'}"
            )
