import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobtracking.models import ApiToken
from jobtracking.services.tokens import hash_key
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_create_api_token_creates_a_service_account_and_stores_only_a_hash():
    out = io.StringIO()
    call_command(
        "create_api_token", "billing-service", "--create", stdout=out, stderr=io.StringIO()
    )
    key = out.getvalue().strip()
    token = ApiToken.objects.get(user__username="billing-service")
    assert token.key_hash == hash_key(key) and key not in token.key_hash
    user = token.user
    assert user.has_perm("jobtracking.add_extractionjob")
    assert user.has_perm("jobtracking.cancel_extractionjob")
    assert not user.has_perm("jobtracking.view_all_extractionjobs")
    assert not user.has_usable_password()


def test_create_api_token_for_an_unknown_user_without_create_fails():
    with pytest.raises(CommandError, match="--create"):
        call_command("create_api_token", "ghost", stdout=io.StringIO(), stderr=io.StringIO())


def test_create_api_token_can_revoke_earlier_tokens():
    UserFactory(username="svc")
    call_command("create_api_token", "svc", stdout=io.StringIO(), stderr=io.StringIO())
    call_command(
        "create_api_token", "svc", "--revoke-others", stdout=io.StringIO(), stderr=io.StringIO()
    )
    assert ApiToken.objects.filter(user__username="svc").count() == 1


def test_docs_render_offline_for_a_logged_in_user(client):
    client.force_login(UserFactory(username="staff", is_staff=True))
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "cdn" not in html.lower() and "/static/drf_spectacular_sidecar/" in html
    schema = client.get("/api/schema/?format=json").json()
    assert "tokenAuth" in schema["components"]["securitySchemes"]
    assert "/api/v1/jobs/bulk/" in schema["paths"]
