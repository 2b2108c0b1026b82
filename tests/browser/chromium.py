"""What every browser test shares: Debian's headless Chromium, where screenshots go, and the
marks that give a test a live server and skip it where Chromium is missing."""

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
# The narrowest common laptop screen: every column must be readable at this width.
LAPTOP = {"width": 1366, "height": 900}
# A common phone: no page may scroll sideways at this width.
PHONE = {"width": 390, "height": 844}

MARKS = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("seeded_statuses"),
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"),
        reason="Chromium is installed by `make test` (.ci/ensure_chromium.sh)",
    ),
]
