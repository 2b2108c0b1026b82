"""Guessing credentials is slowed down: API tokens per client address, admin logins per user."""

import pytest
from axes.models import AccessAttempt
from rest_framework.test import APIClient

from tests.factories import UserFactory
from tests.jobtracking.api.conftest import assert_problem, client_for

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/"


def guesser(address: str) -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    return client


def test_invalid_tokens_from_one_address_end_in_429_and_are_logged(owner, settings, caplog):
    settings.API_AUTH_FAILURE_LIMIT = 10
    attacker = guesser("203.0.113.7")
    for _ in range(10):
        assert_problem(attacker.get(URL), 401, "authentication_failed")
    throttled = assert_problem(attacker.get(URL), 429, "throttled")
    assert "failed authentications" in throttled["detail"]
    # Even the right token from that address waits out the window...
    right = client_for(owner)
    right.defaults["REMOTE_ADDR"] = "203.0.113.7"
    assert right.get(URL).status_code == 429
    # ...while other addresses are not affected.
    assert client_for(owner).get(URL).status_code == 200
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("API authentication failed from 203.0.113.7" in m for m in warnings) == 10
    assert not any("not-a-real-token" in m for m in warnings)


def test_admin_login_is_locked_out_after_repeated_failures(client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    UserFactory(username="operator", is_staff=True, password="right-password-123")
    for _ in range(3):
        response = client.post(
            "/admin/login/",
            {"username": "operator", "password": "wrong"},
            REMOTE_ADDR="198.51.100.4",
        )
    # Locked out: even the right password is refused, and no session is made.
    response = client.post(
        "/admin/login/",
        {"username": "operator", "password": "right-password-123"},
        REMOTE_ADDR="198.51.100.4",
    )
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    assert AccessAttempt.objects.get(username="operator").failures_since_start >= 3


def test_admin_login_still_works_before_the_limit(client):
    UserFactory(username="operator", is_staff=True, password="right-password-123")
    client.post("/admin/login/", {"username": "operator", "password": "wrong"})
    response = client.post(
        "/admin/login/", {"username": "operator", "password": "right-password-123"}
    )
    assert response.status_code == 302 and "_auth_user_id" in client.session
