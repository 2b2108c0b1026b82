"""Production: everything that matters comes from the environment, and `check --deploy` passes.

Required: DJANGO_SECRET_KEY, DJANGO_ALLOWED_HOSTS, DATABASE_URL. Optional:
DJANGO_CSRF_TRUSTED_ORIGINS (comma-separated https origins), DJANGO_SECURE_SSL_REDIRECT (default
on; turn off only when the proxy already redirects), DJANGO_HSTS_SECONDS.
"""

import os

from config.settings.base import *  # noqa: F403
from config.settings.base import env_bool, env_list, env_required

DEBUG = False
SECRET_KEY = env_required("DJANGO_SECRET_KEY")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS") or [env_required("DJANGO_ALLOWED_HOSTS")]
env_required("DATABASE_URL")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

# Behind a TLS-terminating proxy that sets X-Forwarded-Proto.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # load balancers probe over plain HTTP
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", str(365 * 24 * 3600)))
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_SECURE = True
X_FRAME_OPTIONS = "DENY"

# Static files straight from gunicorn (collected by the release step), right after security.
MIDDLEWARE = [*MIDDLEWARE]  # noqa: F405
MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")

STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
LOGGING["handlers"]["console"]["formatter"] = os.environ.get("LOG_FORMAT", "json")  # noqa: F405
