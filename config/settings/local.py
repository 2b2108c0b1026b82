"""Local development: debug on by default and a throwaway secret key."""

import os

from config.settings.base import *  # noqa: F403
from config.settings.base import env_bool

DEBUG = env_bool("DJANGO_DEBUG", True)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or "local-development-only-not-secret"

# The demo's webhook receiver is the sandbox on loopback: that one origin is allowed, not the
# rest of loopback (the web server, PostgreSQL, anything else listening there). Its control and
# inspection routes also need the sandbox token.
OUTBOUND_ALLOWED_ORIGINS = [f"http://127.0.0.1:{os.environ.get('SANDBOX_PORT', '8765')}"]
