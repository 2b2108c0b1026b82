"""Debian's headless Chromium for the browser tests: where it is, how it starts, where the
screenshots go, and the marks every browser test module carries (`pytestmark = BROWSER_TEST`)."""

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

BROWSER_TEST = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("seeded_statuses"),
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"),
        reason="Chromium is installed by `make test` (.ci/ensure_chromium.sh)",
    ),
]
