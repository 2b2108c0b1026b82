"""Local development: debug on by default and a throwaway secret key."""

import os

from config.settings.base import *  # noqa: F403
from config.settings.base import env_bool

DEBUG = env_bool("DJANGO_DEBUG", True)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or "local-development-only-not-secret"

# The demo's sandbox and sample files live on loopback.
OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
