"""Schemathesis against the live OpenAPI document: no 5xx, no response outside the schema."""

import subprocess
import sys
from pathlib import Path

import pytest

from jobtracking.services.tokens import token_issue
from tests.factories import ExtractionJobFactory, ExtractorFactory
from tests.jobtracking.api.conftest import WEBHOOK_PERMISSIONS, service_account

pytestmark = pytest.mark.django_db(transaction=True)

CHECKS = ",".join(
    [
        "not_a_server_error",
        "response_schema_conformance",
        "content_type_conformance",
        "status_code_conformance",
    ]
)


@pytest.mark.usefixtures("seeded_statuses")
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    live_server, settings, tmp_path
):
    # The schema's examples name these: their creates succeed, and the stateful phase follows
    # the created jobs (links inferred from the schema and the Location headers) into the
    # job's reads and actions.
    settings.OUTBOUND_ALLOWED_HOSTS = ["files.example.org", "files.fluxx.example"]
    user = service_account("fuzzer", "view_all_extractionjobs", *WEBHOOK_PERMISSIONS)
    extractor = ExtractorFactory(slug="sandbox")
    ExtractorFactory(slug="azure-layout")
    ExtractionJobFactory.create_batch(3, requested_by=user, extractor=extractor)
    ExtractionJobFactory(requested_by=user, extractor=extractor, failed=True)
    token = token_issue(user=user)
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "schemathesis"),
            "run",
            f"{live_server.url}/api/schema/?format=json",
            "--header",
            f"Authorization: Token {token}",
            "--checks",
            CHECKS,
            # Examples per operation and phase (the coverage and stateful phases still walk
            # every operation); more cost `make test` time it does not have on two cores.
            "--max-examples",
            "10",
            "--seed",
            "1",
            # One worker: several run Hypothesis in threads, whose `ast.parse` CPython 3.11 does
            # not make thread-safe ("AST constructor recursion depth mismatch").
            "--workers",
            "1",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            # /readyz answers 503 on purpose here (no worker heartbeats in this test).
            "--exclude-path",
            "/readyz",
            "--report-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
