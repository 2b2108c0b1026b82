import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from jobtracking.services.tokens import token_issue
from tests.factories import ExtractorFactory, UserFactory


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_issue(user=user)}")
    return client


CLIENT_PERMISSIONS = (
    "view_extractionjob",
    "add_extractionjob",
    "cancel_extractionjob",
    "requeue_extractionjob",
    "view_extractor",
)


# What a client needs to manage its webhook endpoints (the "API clients" group has them).
WEBHOOK_PERMISSIONS = tuple(
    f"{verb}_webhooksubscription" for verb in ("view", "add", "change", "delete")
)


def service_account(username: str, *extra_perms: str):
    """A client with the permissions of the "API clients" group (given directly, since
    transactional tests flush the group the migration creates)."""
    user = UserFactory(username=username)
    for codename in (*CLIENT_PERMISSIONS, *extra_perms):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


@pytest.fixture(autouse=True)
def _api_settings(settings):
    settings.JOBS_EVENT_FEED_SETTLE_SECONDS = 0
    settings.OUTBOUND_ALLOWED_HOSTS = ["files.example.org"]


@pytest.fixture
def owner(db):
    return service_account("owner", "set_interactive_priority")


@pytest.fixture
def api(owner) -> APIClient:
    return client_for(owner)


@pytest.fixture
def other_api(db) -> APIClient:
    return client_for(service_account("other"))


@pytest.fixture
def auditor_api(db) -> APIClient:
    """Holds the view-all permission."""
    return client_for(service_account("auditor", "view_all_extractionjobs"))


@pytest.fixture
def viewer_api(db) -> APIClient:
    """May view jobs but not create, cancel or requeue them."""
    user = UserFactory(username="viewer")
    user.user_permissions.add(Permission.objects.get(codename="view_extractionjob"))
    return client_for(user)


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


@pytest.fixture
def extractor(db):
    return ExtractorFactory(slug="sandbox")


def assert_problem(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    body = response.json()
    assert (body["status"], body["code"]) == (status, code), body
    assert body["type"].endswith(code) and body["title"] and "detail" in body
    return body
