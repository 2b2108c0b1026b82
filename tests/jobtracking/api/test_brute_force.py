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
    # Other addresses are not affected.
    assert_problem(guesser("203.0.113.8").get(URL), 401, "authentication_failed")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("API authentication failed from 203.0.113.7" in m for m in warnings) == 10
    assert not any("not-a-real-token" in m for m in warnings)


def test_a_valid_token_is_accepted_from_an_address_past_the_limit(owner, settings):
    """Behind a proxy every client may share one address: guessing from it must not lock the
    others out."""
    settings.API_AUTH_FAILURE_LIMIT = 10
    attacker = guesser("203.0.113.7")
    for _ in range(10):
        assert_problem(attacker.get(URL), 401, "authentication_failed")
    right = client_for(owner)
    right.defaults["REMOTE_ADDR"] = "203.0.113.7"
    assert right.get(URL).status_code == 200
    assert_problem(attacker.get(URL), 429, "throttled")


def behind_proxy(forwarded_for: str, token: str = "not-a-real-token") -> APIClient:
    client = APIClient(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=forwarded_for)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_behind_a_trusted_proxy_failures_count_per_forwarded_address(settings):
    settings.API_AUTH_FAILURE_LIMIT = 3
    settings.API_TRUSTED_PROXY_COUNT = 1
    # The client's own X-Forwarded-For entries (left of what the proxy appended) are ignored.
    for spoofed in ("1.1.1.1", "2.2.2.2", "3.3.3.3"):
        response = behind_proxy(f"{spoofed}, 203.0.113.7").get(URL)
        assert_problem(response, 401, "authentication_failed")
    assert_problem(behind_proxy("4.4.4.4, 203.0.113.7").get(URL), 429, "throttled")
    # Another client behind the same proxy is not affected.
    assert_problem(behind_proxy("198.51.100.9").get(URL), 401, "authentication_failed")


def test_with_two_trusted_proxies_the_second_address_from_the_right_is_the_client(settings, caplog):
    settings.API_TRUSTED_PROXY_COUNT = 2
    behind_proxy("6.6.6.6, 203.0.113.7, 10.0.0.1").get(URL)
    # A request with fewer entries than proxies bypassed one: its REMOTE_ADDR counts.
    behind_proxy("203.0.113.7").get(URL)
    failures = [r.getMessage() for r in caplog.records if r.name == "jobtracking.api.auth"]
    assert "API authentication failed from 203.0.113.7" in failures[0]
    assert "API authentication failed from 10.0.0.2" in failures[1]


def test_admin_login_lockout_counts_the_forwarded_address(client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.API_TRUSTED_PROXY_COUNT = 1
    UserFactory(username="operator", is_staff=True, password="right-password-123")
    proxied = {"REMOTE_ADDR": "10.0.0.2"}
    for _ in range(3):
        client.post(
            "/admin/login/",
            {"username": "operator", "password": "wrong"},
            HTTP_X_FORWARDED_FOR="198.51.100.4",
            **proxied,
        )
    response = client.post(
        "/admin/login/",
        {"username": "operator", "password": "right-password-123"},
        HTTP_X_FORWARDED_FOR="192.0.2.20",
        **proxied,
    )
    assert response.status_code == 302 and "_auth_user_id" in client.session


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
