"""API tokens may expire, and staff can revoke every token of a user in the admin."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from jobtracking.models import ApiToken
from tests.conftest import recent_lookups_clear
from tests.jobtracking.admin.conftest import staff
from tests.jobtracking.api.conftest import assert_problem, client_for, service_account

pytestmark = pytest.mark.django_db
JOBS = "/api/v1/jobs/"
TOKENS = "/admin/jobtracking/apitoken/"


def test_an_expired_token_is_refused_and_a_live_one_accepted(owner):
    api = client_for(owner)
    assert api.get(JOBS).status_code == 200
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    recent_lookups_clear()
    problem = assert_problem(api.get(JOBS), 401, "authentication_failed")
    assert "expired" in problem["detail"]
    ApiToken.objects.update(expires_at=timezone.now() + timedelta(days=1))
    recent_lookups_clear()
    assert api.get(JOBS).status_code == 200


def test_create_api_token_sets_an_expiry(owner, capsys):
    call_command("create_api_token", owner.username, "--expires-days", "7")
    token = ApiToken.objects.latest("created_at")
    assert timedelta(days=6, hours=23) < token.expires_at - timezone.now() <= timedelta(days=7)
    assert "expires in 7 day(s)" in capsys.readouterr().err
    with pytest.raises(CommandError, match="at least 1"):
        call_command("create_api_token", owner.username, "--expires-days", "0")


def test_staff_revoke_every_token_of_a_user_in_the_admin(client):
    leaver, stayer = service_account("leaver"), service_account("stayer")
    leaving = [client_for(leaver), client_for(leaver)]
    staying = client_for(stayer)
    client.force_login(staff("view_apitoken", "delete_apitoken"))
    page = client.get(TOKENS).content.decode()
    assert "leaver" in page and "revoke_all_of_their_users" in page
    one = ApiToken.objects.filter(user=leaver).first()
    client.post(TOKENS, {"action": "revoke_all_of_their_users", "_selected_action": [one.pk]})
    assert not ApiToken.objects.filter(user=leaver).exists()
    assert ApiToken.objects.filter(user=stayer).count() == 1
    recent_lookups_clear()
    assert [api.get(JOBS).status_code for api in leaving] == [401, 401]
    assert staying.get(JOBS).status_code == 200


def test_a_view_only_user_cannot_revoke_tokens(client):
    holder = service_account("holder")
    client_for(holder)
    client.force_login(staff("view_apitoken"))
    assert "revoke_all_of_their_users" not in client.get(TOKENS).content.decode()
    token = ApiToken.objects.get()
    client.post(TOKENS, {"action": "revoke_all_of_their_users", "_selected_action": [token.pk]})
    assert ApiToken.objects.filter(pk=token.pk).exists()
