"""`make run`'s settings let the service reach the demo's sandbox and nothing else on loopback:
a client's `source_url` or webhook aimed at the web server itself is refused."""

import subprocess
import sys

SCRIPT = """
import django
django.setup()
from extraction.urlsafety import UnsafeURLError, check_public_url
check_public_url("http://127.0.0.1:8765/_sandbox/webhooks")
for url in ("http://127.0.0.1:8000/admin/", "http://127.0.0.1:5432/", "http://[::1]:8765/"):
    try:
        check_public_url(url)
    except UnsafeURLError:
        continue
    raise SystemExit(f"allowed: {url}")
print("ok")
"""


def test_make_runs_outbound_allowance_is_the_sandbox_origin_only():
    env = {"DJANGO_SETTINGS_MODULE": "config.settings.local", "SANDBOX_PORT": "8765"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "ok", done.stderr
