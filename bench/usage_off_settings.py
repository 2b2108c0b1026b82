"""Test settings with usage recording off (`bench.usage_off`), for `bench.usage`'s processes."""

from config.settings.test import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "bench.usage_off.UsageOff"]  # noqa: F405
