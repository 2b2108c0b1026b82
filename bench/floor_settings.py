"""Production settings plus the floor's URL (`bench.floor`), for the API benchmark's gunicorn."""

from config.settings.production import *  # noqa: F403

ROOT_URLCONF = "bench.floor"
