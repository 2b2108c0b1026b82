"""docs/api.md's client example, run for real: a multipart upload through a live server, a wait
with backoff while the job moves on, and a webhook verified as a receiver would."""

import re
import threading

import pytest
from standardwebhooks import WebhookVerificationError

from docs.examples.client import create_from_file, verify_webhook, wait_for
from jobtracking.models import JobEvent, WebhookSubscription
from jobtracking.services import Actor, job_transition
from jobtracking.services.tokens import token_issue
from jobtracking.webhooks.sending import delivery_body, post_signed, subscription_secret
from tests.factories import ExtractorFactory
from tests.jobtracking.api.conftest import service_account
from tests.processes import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("seeded_statuses")]


def test_upload_then_wait_with_backoff(live_server, tmp_path):
    ExtractorFactory(slug="sandbox")
    token = token_issue(user=service_account("example-client"))
    budget = tmp_path / "budget.csv"
    budget.write_bytes(b"item,amount\nrent,100\n")

    job = create_from_file(live_server.url, token, str(budget), extractor="sandbox", file_id="b-1")
    assert job["status"] == "pending" and job["content_type"] == "text/csv"
    replay = create_from_file(
        live_server.url, token, str(budget), extractor="sandbox", file_id="b-1"
    )
    assert replay["id"] == job["id"]  # the Idempotency-Key made the retry safe

    def finish():
        for status in ("submitting", "submitted", "failed"):
            job_transition(job_id=job["id"], to_status=status, actor=Actor.system())

    threading.Timer(0.3, finish).start()
    done = wait_for(job["links"]["self"], token, timeout=20, first_wait=0.1)
    assert done["status"] == "failed" and done["id"] == job["id"]


def test_create_errors_are_raised_with_the_problem(live_server, tmp_path):
    token = token_issue(user=service_account("example-client"))
    path = tmp_path / "a.csv"
    path.write_bytes(b"a,b\n")
    with pytest.raises(RuntimeError, match=r"validation_error.*No extractor 'nope'"):
        create_from_file(live_server.url, token, str(path), extractor="nope", file_id="x")


def test_a_receiver_verifies_what_the_service_signs(httpserver, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    subscription = WebhookSubscription.objects.create(
        url=httpserver.url_for("/hook"), all_event_types=True
    )
    secret = subscription_secret(subscription)
    received = {}

    def receiver(request):
        from werkzeug import Response

        received["event"] = verify_webhook(secret, request.get_data(), dict(request.headers))
        with pytest.raises(WebhookVerificationError):
            verify_webhook(secret, request.get_data() + b" ", dict(request.headers))
        return Response("stored", 200)

    httpserver.expect_request("/hook", method="POST").respond_with_handler(receiver)
    from tests.factories import JobEventFactory

    event = JobEventFactory()
    status = post_signed(subscription, str(event.event_id), delivery_body(event)).status
    assert status == 200 and received["event"]["type"] == JobEvent.objects.get().type


def test_docs_python_is_the_example_clients_own_code():
    # What docs/api.md shows is what runs here: each block is a verbatim part of client.py.
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S)
    source = (ROOT / "docs" / "examples" / "client.py").read_text()
    assert len(blocks) >= 4
    for block in blocks:
        assert block in source, block
