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
