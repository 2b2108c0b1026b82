"""Test settings with the engine features `BENCH_OFF` names turned off (`bench.off`), for the
"without" runs' processes of an A/B (`bench.engine.feature_ab`)."""

from config.settings.base import env_list
from config.settings.test import *  # noqa: F403
from config.settings.test import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench.off.Off"]
BENCH_OFF = env_list("BENCH_OFF")
