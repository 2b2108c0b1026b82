"""Opt-in benchmarks (`make bench`). They print figures and ratios; they assert nothing."""

import os

import django


def setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    os.environ.setdefault("Q_SYNC", "0")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
