import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from extraction.models import Adapter, Extractor

DEMO_ADMIN = "admin"


class Command(BaseCommand):
    help = "Create the demo admin user and the sandbox extractor (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--sandbox-url",
            default=os.environ.get("SANDBOX_URL", "http://127.0.0.1:8765"),
            help="Where the bundled sandbox extractor listens.",
        )

    def handle(self, *args, **options):
        password = os.environ.get("DEMO_ADMIN_PASSWORD", "fluxx-demo")
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
                "api_key_env": "SANDBOX_API_KEY",
                "enabled": True,
            },
        )
        self.stdout.write(
            f"Admin user {DEMO_ADMIN!r} {'created' if created else 'ready'}; "
            f"extractor {extractor.slug!r} at {extractor.base_url}."
        )
        port = os.environ.get("PORT", "8000")
        self.stdout.write(
            self.style.SUCCESS(
                f"Admin console: http://127.0.0.1:{port}/admin/  login: {DEMO_ADMIN} / {password}"
            )
        )
