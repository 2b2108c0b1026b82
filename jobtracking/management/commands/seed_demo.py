import mimetypes
import os
from datetime import timedelta
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.core.management.base import BaseCommand

from extraction.models import Adapter, Extractor
from jobtracking.errors import ActiveJobExistsError
from jobtracking.infra import tracing
from jobtracking.models import ExtractionJob, WebhookSubscription
from jobtracking.services import Actor, NewJob, job_create
from jobtracking.webhooks.sending import subscription_secret

DEMO_ADMIN = "admin"
DEMO_REUSE_WINDOW = timedelta(days=1)


def demo_login() -> tuple[str, str]:
    return DEMO_ADMIN, os.environ.get("DEMO_ADMIN_PASSWORD", "fluxx-demo")


SAMPLES = Path(__file__).resolve().parents[3] / "extraction" / "sandbox" / "samples"


class Command(BaseCommand):
    help = (
        "Create the demo admin user, the sandbox extractor, and one job per sample document "
        "(idempotent: files that already have a job are skipped)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--sandbox-url",
            default=os.environ.get(
                "SANDBOX_URL", f"http://127.0.0.1:{os.environ.get('SANDBOX_PORT', '8765')}"
            ),
            help="Where the bundled sandbox extractor listens.",
        )

    def handle(self, *args, **options):
        _, password = demo_login()
        user, created = get_user_model().objects.get_or_create(
            username=DEMO_ADMIN, defaults={"is_staff": True, "is_superuser": True}
        )
        # Reset every time so the printed login always works.
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()

        extractor, _ = Extractor.objects.update_or_create(
            slug="sandbox",
            defaults={
                "name": "Bundled sandbox extractor",
                "adapter": Adapter.SANDBOX,
                "base_url": options["sandbox_url"],
                "api_key_env": "",  # the bundled sandbox takes no key
                "enabled": True,
                # A sample uploaded again is served its first result (docs/architecture.md,
                # Usage): the demo shows reuse on, which a real extractor's row starts without.
                "reuse_window": DEMO_REUSE_WINDOW,
            },
        )
        self.stdout.write(
            f"Admin user {DEMO_ADMIN!r} {'created' if created else 'ready'}; "
            f"extractor {extractor.slug!r} at {extractor.base_url}."
        )
        subscription, _ = WebhookSubscription.objects.get_or_create(
            url=f"{options['sandbox_url']}/_sandbox/webhooks",
            defaults={
                "description": "Demo receiver (the sandbox keeps what it gets)",
                "all_event_types": True,
                "all_jobs": True,
            },
        )
        self.stdout.write(
            f"Webhooks go to {subscription.url} (see what arrived with GET on that URL, with "
            "the X-Sandbox-Token header `make run` prints), signed with "
            f"{subscription_secret(subscription)}."
        )
        self.seed_jobs(extractor, user)
        port = os.environ.get("PORT", "8000")
        self.stdout.write(
            self.style.SUCCESS(
                f"Admin console: http://127.0.0.1:{port}/admin/  login: {DEMO_ADMIN} / {password}"
            )
        )

    def seed_jobs(self, extractor: Extractor, user) -> None:
        created = 0
        for path in sorted(SAMPLES.iterdir()):
            file_id = f"demo-{path.name}"
            if ExtractionJob.objects.filter(extractor=extractor, file_id=file_id).exists():
                continue
            try:
                job = job_create(
                    NewJob(
                        extractor=extractor,
                        file_id=file_id,
                        file_name=path.name,
                        content_type=mimetypes.guess_type(path.name)[0] or "",
                        file_size=path.stat().st_size,
                        upload=ContentFile(path.read_bytes(), name=path.name),
                        metadata={"demo": True},
                    ),
                    actor=Actor.command(user),
                    reason="Demo data",
                )
                created += 1
            except ActiveJobExistsError:
                continue
            self.stdout.write(f"  {path.name}: job {job.pk}{_trace_note(job)}")
        self.stdout.write(f"Seeded {created} demo job(s) from {SAMPLES.name}/.")


def _trace_note(job: ExtractionJob) -> str:
    """With tracing on, where to find the job's trace in the tracing backend."""
    ids = tracing.trace_ids(job.traceparent)
    return f", trace {ids[0]}" if ids else ""
