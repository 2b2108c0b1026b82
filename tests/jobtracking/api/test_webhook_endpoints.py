"""`/api/v1/webhook_endpoints/`: a client's own subscriptions (CRUD, secret shown once, the URL
guard, event types), a signed test event and the deliveries with every attempt, against a real
local receiver that verifies signatures with the `standardwebhooks` package."""

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from standardwebhooks import Webhook
from werkzeug import Response

from jobtracking.models import DeliveryState, WebhookDelivery, WebhookSubscription
from jobtracking.services.deliveries import deliver
from jobtracking.webhooks.sending import subscription_secret, subscription_secrets
from tests.factories import UserFactory, api_job
from tests.jobtracking.api.conftest import (
    WEBHOOK_PERMISSIONS,
    assert_problem,
    client_for,
    service_account,
)

pytestmark = pytest.mark.django_db
URL = "/api/v1/webhook_endpoints/"


@pytest.fixture(autouse=True)
def _receivers(settings):
    settings.OUTBOUND_ALLOWED_HOSTS = ["hooks.example.org", "files.example.org"]
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.WEBHOOK_READ_TIMEOUT = 0.5


@pytest.fixture
def alice(db):
    return service_account("alice", *WEBHOOK_PERMISSIONS)


@pytest.fixture
def bob(db):
    return service_account("bob", *WEBHOOK_PERMISSIONS)


@pytest.fixture
def hooks(alice):
    return client_for(alice)


def create(client, **body) -> dict:
    """A new endpoint; of every event type unless `event_types` are given."""
    if "event_types" not in body:
        body["all_event_types"] = True
    response = client.post(URL, {"url": "https://hooks.example.org/a", **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_webhook_endpoints_create_answers_the_secret_once(hooks, alice):
    response = hooks.post(
        URL,
        {
            "url": "https://hooks.example.org/a",
            "event_types": ["job.succeeded", "job.failed", "job.succeeded"],
            "description": "billing",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    created = response.json()
    subscription = WebhookSubscription.objects.get()
    assert created["secret"] == subscription_secret(subscription)
    assert response["Location"].endswith(f"{URL}{subscription.pk}/")
    assert (subscription.created_by, subscription.active, subscription.all_jobs) == (
        alice,
        True,
        False,
    )
    assert created["event_types"] == ["job.succeeded", "job.failed"]
    shown = hooks.get(f"{URL}{subscription.pk}/").json()
    assert "secret" not in shown and shown["description"] == "billing"
    assert all("secret" not in item for item in hooks.get(URL).json()["results"])


def test_webhook_endpoints_patch_changes_only_what_is_sent_and_delete_removes(hooks):
    endpoint = create(hooks, event_types=["job.failed"])
    changed = hooks.patch(f"{URL}{endpoint['id']}/", {"enabled": False}, format="json")
    assert changed.status_code == 200, changed.content
    subscription = WebhookSubscription.objects.get()
    assert (subscription.active, subscription.event_types) == (False, ["job.failed"])
    assert changed.json()["enabled"] is False and "secret" not in changed.json()
    assert hooks.put(f"{URL}{endpoint['id']}/", {}, format="json").status_code == 405
    assert hooks.delete(f"{URL}{endpoint['id']}/").status_code == 204
    assert not WebhookSubscription.objects.exists()


@pytest.mark.parametrize("method", ["post", "patch"])
def test_webhook_endpoints_refuse_a_private_url_and_change_nothing(hooks, method):
    if method == "post":
        response = hooks.post(URL, {"url": "http://10.1.2.3/hooks"}, format="json")
    else:
        endpoint = create(hooks)
        response = hooks.patch(
            f"{URL}{endpoint['id']}/", {"url": "http://10.1.2.3/hooks"}, format="json"
        )
    problem = assert_problem(response, 400, "validation_error")
    assert "non-public" in problem["errors"]["url"][0]
    assert list(WebhookSubscription.objects.values_list("url", flat=True)) == (
        [] if method == "post" else ["https://hooks.example.org/a"]
    )


def test_webhook_endpoints_refuse_unknown_event_types_fields_and_parameters(hooks):
    problem = assert_problem(
        hooks.post(
            URL,
            {"url": "https://hooks.example.org/a", "event_types": ["job.exploded"]},
            format="json",
        ),
        400,
        "validation_error",
    )
    assert "job.exploded" in problem["errors"]["event_types.0"][0]
    problem = assert_problem(
        hooks.post(URL, {"url": "https://hooks.example.org/a", "colour": "red"}, format="json"),
        400,
        "validation_error",
    )
    assert problem["errors"]["colour"][0].startswith("Unknown field.")
    problem = assert_problem(hooks.get(URL, {"state": "dead"}), 400, "validation_error")
    assert "Unknown query parameter" in problem["errors"]["state"][0]
    assert not WebhookSubscription.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"event_types": []},
        {"all_event_types": False},
        {"event_types": [], "all_event_types": False},
        {"event_types": ["job.failed"], "all_event_types": True},
    ],
)
def test_webhook_endpoints_name_their_event_types_or_choose_all(hooks, body):
    # An empty list is no type: every type, new ones included, is chosen explicitly.
    problem = assert_problem(
        hooks.post(URL, {"url": "https://hooks.example.org/a", **body}, format="json"),
        400,
        "validation_error",
    )
    assert "all_event_types" in problem["errors"]["event_types"][0]
    assert not WebhookSubscription.objects.exists()


def test_webhook_endpoints_change_between_listed_and_all_event_types(hooks):
    endpoint = create(hooks)
    assert (endpoint["event_types"], endpoint["all_event_types"]) == ([], True)
    url = f"{URL}{endpoint['id']}/"
    for refused in ({"event_types": ["job.failed"]}, {"all_event_types": False}):
        assert_problem(hooks.patch(url, refused, format="json"), 400, "validation_error")
    assert WebhookSubscription.objects.get().all_event_types is True

    listed = hooks.patch(
        url, {"event_types": ["job.failed"], "all_event_types": False}, format="json"
    )
    assert listed.status_code == 200, listed.content
    assert (listed.json()["event_types"], listed.json()["all_event_types"]) == (
        ["job.failed"],
        False,
    )
    assert_problem(hooks.patch(url, {"event_types": []}, format="json"), 400, "validation_error")
    every = hooks.patch(url, {"event_types": [], "all_event_types": True}, format="json")
    assert every.status_code == 200, every.content
    subscription = WebhookSubscription.objects.get()
    assert (subscription.event_types, subscription.all_event_types) == ([], True)


def test_webhook_endpoints_of_another_client_do_not_exist_for_it(hooks, bob):
    theirs = client_for(bob)
    endpoint = create(hooks)
    path = f"{URL}{endpoint['id']}/"
    for response in (
        theirs.get(path),
        theirs.patch(path, {"enabled": False}, format="json"),
        theirs.delete(path),
        theirs.post(f"{path}rotate_secret/"),
        theirs.post(f"{path}test/"),
        theirs.get(f"{path}deliveries/"),
    ):
        assert_problem(response, 404, "webhook_endpoint_not_found")
    assert theirs.get(URL).json()["results"] == []
    assert WebhookSubscription.objects.get().active


def test_webhook_endpoints_list_only_the_callers_own_even_with_view_all(hooks, bob):
    create(hooks)
    auditor = service_account("auditor", "view_all_extractionjobs", *WEBHOOK_PERMISSIONS)
    assert client_for(auditor).get(URL).json()["results"] == []
    assert len(hooks.get(URL).json()["results"]) == 1


def test_webhook_endpoints_need_the_subscription_permissions(db):
    viewer = client_for(service_account("viewer"))  # a jobs client without webhook rights
    assert_problem(viewer.get(URL), 403, "permission_denied")
    body = {"url": "https://hooks.example.org/a"}
    assert_problem(viewer.post(URL, body, format="json"), 403, "permission_denied")
    assert_problem(client_for(UserFactory()).get(URL), 403, "permission_denied")


def test_webhook_endpoints_every_job_needs_the_view_all_permission(hooks):
    problem = assert_problem(
        hooks.post(URL, {"url": "https://hooks.example.org/a", "all_jobs": True}, format="json"),
        400,
        "validation_error",
    )
    assert "view_all_extractionjobs" in problem["errors"]["all_jobs"][0]
    auditor = service_account("auditor", "view_all_extractionjobs", *WEBHOOK_PERMISSIONS)
    assert create(client_for(auditor), all_jobs=True)["all_jobs"] is True


@pytest.mark.parametrize(
    "change",
    [{"description": "renamed"}, {"all_jobs": True}, {"enabled": False}, {}],
)
def test_webhook_endpoints_every_job_needs_the_view_all_permission_at_every_save(change):
    auditor = service_account("auditor", "view_all_extractionjobs", *WEBHOOK_PERMISSIONS)
    endpoint = create(client_for(auditor), all_jobs=True, description="everything")
    auditor.user_permissions.remove(Permission.objects.get(codename="view_all_extractionjobs"))
    hooks, url = client_for(auditor), f"{URL}{endpoint['id']}/"
    problem = assert_problem(hooks.patch(url, change, format="json"), 400, "validation_error")
    assert "view_all_extractionjobs" in problem["errors"]["all_jobs"][0]
    unchanged = WebhookSubscription.objects.get()
    assert (unchanged.all_jobs, unchanged.description, unchanged.active) == (
        True,
        "everything",
        True,
    )
    # Giving it up is the way out; the client may then change the rest again.
    given_up = hooks.patch(url, {"all_jobs": False}, format="json")
    assert given_up.status_code == 200 and given_up.json()["all_jobs"] is False
    assert hooks.patch(url, {"description": "mine"}, format="json").status_code == 200


def test_webhook_endpoints_are_changed_by_patch_only(hooks):
    endpoint = create(hooks)
    body = {"url": "https://hooks.example.org/a", "all_jobs": True}
    assert_problem(
        hooks.put(f"{URL}{endpoint['id']}/", body, format="json"), 405, "method_not_allowed"
    )


def test_webhook_endpoints_receive_only_the_events_of_the_clients_own_jobs(hooks, alice, bob):
    endpoint = create(hooks, event_types=["job.created"])
    mine = api_job(file_id="mine", user=alice)
    api_job(file_id="theirs", user=bob)
    delivered = WebhookDelivery.objects.filter(subscription_id=endpoint["id"])
    assert [d.event.job_id for d in delivered] == [mine.pk]


def test_webhook_endpoints_rotate_secret_answers_the_new_one_once(hooks):
    first = create(hooks)
    rotated = hooks.post(f"{URL}{first['id']}/rotate_secret/")
    assert rotated.status_code == 200, rotated.content
    subscription = WebhookSubscription.objects.get()
    assert rotated.json()["secret"] == subscription_secret(subscription) != first["secret"]
    # The old secret still signs, beside the new one, while the receiver switches.
    assert subscription_secrets(subscription) == [rotated.json()["secret"], first["secret"]]
    assert "secret" not in hooks.get(f"{URL}{first['id']}/").json()
    problem = assert_problem(
        hooks.post(f"{URL}{first['id']}/rotate_secret/", {"now": True}, format="json"),
        400,
        "validation_error",
    )
    assert "now" in problem["errors"]


def test_webhook_endpoints_test_event_is_signed_and_verifiable(hooks, httpserver):
    endpoint = create(hooks, url=httpserver.url_for("/hooks"))
    verified = []

    def receiver(request):
        verified.append(
            Webhook(endpoint["secret"]).verify(request.get_data(), dict(request.headers))
        )
        return Response("thanks", 200)

    httpserver.expect_request("/hooks", method="POST").respond_with_handler(receiver)
    answer = hooks.post(f"{URL}{endpoint['id']}/test/")
    assert answer.status_code == 200, answer.content
    result = answer.json()
    assert (result["delivered"], result["http_status"], result["error"]) == (True, 200, "")
    assert result["response_excerpt"] == "thanks"
    assert verified[0]["type"] == "webhook.test"
    assert verified[0]["data"]["subscription_id"] == endpoint["id"]
    assert not WebhookDelivery.objects.exists()  # recorded nowhere


def test_webhook_endpoints_test_event_reports_a_failing_receiver(hooks, httpserver):
    endpoint = create(hooks, url=httpserver.url_for("/hooks"))
    httpserver.expect_request("/hooks").respond_with_data("nope", status=503)
    result = hooks.post(f"{URL}{endpoint['id']}/test/").json()
    assert (result["delivered"], result["http_status"]) == (False, 503)
    assert result["error"] == "The receiver did not answer with HTTP 2xx (HTTP 503)"


def test_webhook_endpoints_deliveries_list_every_attempt(hooks, alice, httpserver):
    endpoint = create(hooks, url=httpserver.url_for("/hooks"), event_types=["job.created"])
    httpserver.expect_oneshot_request("/hooks").respond_with_data("boom", status=500)
    httpserver.expect_request("/hooks").respond_with_data("ok")
    first, second = (api_job(file_id=f"f-{n}", user=alice) for n in range(2))
    for delivery in WebhookDelivery.objects.order_by("pk"):
        deliver(delivery.pk)
    deliver(WebhookDelivery.objects.order_by("pk").first().pk)

    with CaptureQueriesContext(connection) as queries:
        page = hooks.get(f"{URL}{endpoint['id']}/deliveries/", {"page_size": 1}).json()
    assert len(queries) <= 6  # token, endpoint, deliveries, attempts: not one per row
    (newest,) = page["results"]
    assert (newest["job"], newest["state"]) == (str(second.pk), "delivered")
    older = hooks.get(page["next"]).json()["results"][0]
    assert (older["job"], older["event_type"], older["state"]) == (
        str(first.pk),
        "job.created",
        "delivered",
    )
    assert [(a["http_status"], a["error"], a["response_excerpt"]) for a in older["attempts"]] == [
        (500, f"HTTP 500 from localhost:{httpserver.port}", "boom"),
        (200, "", "ok"),
    ]
    assert all(a["attempted_at"].endswith("Z") for a in older["attempts"])


def test_webhook_endpoints_redeliver_schedules_one_delivery_again(hooks, alice, httpserver):
    endpoint = create(hooks, url=httpserver.url_for("/hooks"), event_types=["job.created"])
    httpserver.expect_request("/hooks").respond_with_data("ok")
    api_job(user=alice)
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        state=DeliveryState.DEAD, attempts=8, next_attempt_at=None
    )
    path = f"{URL}{endpoint['id']}/deliveries/{delivery.pk}/redeliver/"
    answer = hooks.post(path)
    assert answer.status_code == 202, answer.content
    assert answer.json()["state"] == "pending"
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("pending", 0)
    assert deliver(delivery.pk) == "delivered"
    listed = hooks.get(f"{URL}{endpoint['id']}/deliveries/").json()["results"][0]
    assert [a["http_status"] for a in listed["attempts"]] == [200]


def test_webhook_endpoints_redeliver_knows_only_the_endpoints_own_deliveries(hooks, alice):
    mine = create(hooks, event_types=["job.created"])
    other = create(hooks, url="https://hooks.example.org/b", event_types=["job.created"])
    api_job(user=alice)
    theirs = WebhookDelivery.objects.get(subscription_id=other["id"])
    assert_problem(
        hooks.post(f"{URL}{mine['id']}/deliveries/{theirs.pk}/redeliver/"),
        404,
        "webhook_delivery_not_found",
    )


def test_webhook_endpoint_not_found_has_a_problem_page(anonymous):
    page = anonymous.get("/api/problems/webhook_endpoint_not_found")
    assert page.status_code == 200 and page.json()["status"] == 404


def test_webhook_endpoints_json_bodies_have_their_own_request_components(api):
    schema = api.get("/api/schema/?format=json").json()
    components = schema["components"]["schemas"]
    paths = schema["paths"]

    def request_component(path, method):
        body = paths[path][method]["requestBody"]["content"]
        assert list(body) == ["application/json"]
        return components[body["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]]

    created = request_component(URL, "post")
    assert created["required"] == ["url"] and "id" not in created["properties"]
    patched = request_component(f"{URL}{{id}}/", "patch")
    assert "required" not in patched
    answer = paths[URL]["post"]["responses"]["201"]["content"]["application/json"]["schema"]
    assert "secret" in components[answer["$ref"].rsplit("/", 1)[-1]]["required"]
    deliveries = paths[f"{URL}{{id}}/deliveries/"]["get"]
    assert {p["name"] for p in deliveries["parameters"]} == {"id", "cursor", "page_size"}
    redeliver = paths[f"{URL}{{id}}/deliveries/{{delivery_id}}/redeliver/"]["post"]
    assert {p["schema"]["type"] for p in redeliver["parameters"]} == {"integer"}


def test_webhook_endpoints_show_in_the_browsable_api(client, alice):
    client.force_login(alice)
    endpoint = create(client_for(alice))
    for path in (URL, f"{URL}{endpoint['id']}/", f"{URL}{endpoint['id']}/deliveries/"):
        page = client.get(path, HTTP_ACCEPT="text/html")
        assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
        assert endpoint["secret"] not in page.content.decode()
