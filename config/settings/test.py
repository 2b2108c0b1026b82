"""Test settings: the suite runs on PostgreSQL only (`make test` starts a throwaway one)."""

from config.settings.base import *  # noqa: F403
from config.settings.base import (
    BASE_DIR,
    DATABASES,
    INSTALLED_APPS,
    Q_CLUSTER,
    STORAGES,
    env_bool,
    env_required,
)

env_required("DATABASE_URL")
assert DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql", (
    "The test suite needs PostgreSQL: run it with `make test` or set DATABASE_URL."
)

# Models only the tests use (`tests/testapp`).
INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]
SECRET_KEY = "test-only-not-secret"
DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
MEDIA_ROOT = BASE_DIR / ".test-media"
STORAGES = {
    **STORAGES,
    "archive": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": BASE_DIR / ".test-archive"},
    },
}
# Unit tests run tasks inline; the end-to-end tests start real clusters with Q_SYNC=0.
Q_CLUSTER = {**Q_CLUSTER, "sync": env_bool("Q_SYNC", True)}
# Names the tests use for files and webhooks; they do not resolve here.
OUTBOUND_ALLOWED_HOSTS = ["files.example.org", "hooks.example.org"]
