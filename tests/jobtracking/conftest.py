from datetime import timedelta

import pytest

from extraction.models import Adapter
from tests.factories import ExtractorFactory

# Polls a test can wait for.
FAST = {
    "poll_initial_interval": timedelta(milliseconds=50),
    "poll_max_interval": timedelta(milliseconds=200),
}


@pytest.fixture
def sandbox_extractor(sandbox):
    return ExtractorFactory(slug="sandbox", adapter=Adapter.SANDBOX, base_url=sandbox.url, **FAST)


@pytest.fixture
def archive(settings, tmp_path):
    """A fresh local archive and media folder; every status purgeable at once."""
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.STORAGES = {
        **settings.STORAGES,
        "archive": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "archive"},
        },
    }
    settings.JOBS_RETENTION_DAYS = dict.fromkeys(settings.JOBS_RETENTION_DAYS, 0)
    return tmp_path / "archive"
