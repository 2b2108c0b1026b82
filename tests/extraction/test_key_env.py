"""An extractor's key variable cannot be turned into a way to send any secret to any server."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.forms.models import model_to_dict

from extraction.models import Adapter, Extractor
from extraction.registry import get_client
from tests.factories import ExtractorFactory, UserFactory

pytestmark = pytest.mark.django_db
CHANGE = "/admin/extraction/extractor/{}/change/"


def staff_client(client, *codenames: str):
    user = UserFactory(username=f"staff-{len(codenames)}", is_staff=True)
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client.force_login(user)
    return client


def change_form(extractor: Extractor, **changes) -> dict:
    data = {k: v for k, v in model_to_dict(extractor).items() if v is not None}
    for name in ("request_timeout", "poll_initial_interval", "poll_max_interval", "max_duration"):
        data[name] = str(data[name])
    return {**data, **changes}


@pytest.mark.parametrize("name", ["DATABASE_URL", "DJANGO_SECRET_KEY", "WEBHOOK_SIGNING_KEY"])
def test_api_key_env_refuses_variables_outside_the_allowed_patterns(name):
    extractor = ExtractorFactory.build(api_key_env=name)
    with pytest.raises(ValidationError) as refused:
        extractor.full_clean(exclude=["slug"])
    assert "api_key_env" in refused.value.message_dict
    ExtractorFactory.build(api_key_env="EXTRACTOR_AZURE_KEY").full_clean(exclude=["slug"])


def test_a_row_naming_another_variable_never_sends_it(httpserver):
    """The attack: the row names DATABASE_URL (set here) and points at a capture server."""
    # Written past validation, as an old row or a raw SQL change would be.
    extractor = ExtractorFactory(adapter=Adapter.HTTP_ASYNC, base_url=httpserver.url_for(""))
    Extractor.objects.filter(pk=extractor.pk).update(api_key_env="DATABASE_URL")
    extractor.refresh_from_db()
    httpserver.expect_request("/v1/extractions/connection-check").respond_with_json({}, 404)
    get_client(extractor).check_connection()
    (request, _response) = httpserver.log[0]
    assert "Authorization" not in request.headers
    assert extractor.api_key() == ""


def test_staff_without_the_endpoint_permission_cannot_repoint_an_extractor(client):
    extractor = ExtractorFactory(base_url="https://extractor.example.org")
    browser = staff_client(client, "view_extractor", "change_extractor")
    form = change_form(
        extractor, base_url="http://capture.example.net", api_key_env="EXTRACTOR_OTHER_KEY"
    )
    form["name"] = "renamed"
    response = browser.post(CHANGE.format(extractor.pk), form)
    assert response.status_code == 302
    extractor.refresh_from_db()
    assert extractor.name == "renamed"  # the rest of the form is theirs to change
    assert (extractor.base_url, extractor.api_key_env) == (
        "https://extractor.example.org",
        "EXTRACTOR_TEST_KEY",
    )
    # Adding an extractor (choosing its address and key) needs the permission too.
    assert browser.get("/admin/extraction/extractor/add/").status_code == 403


def test_an_endpoint_change_is_validated_and_recorded_in_the_admin_log(client):
    extractor = ExtractorFactory()
    browser = staff_client(
        client, "view_extractor", "change_extractor", "change_extractor_endpoint"
    )
    refused = browser.post(CHANGE.format(extractor.pk), change_form(extractor, api_key_env="HOME"))
    assert refused.status_code == 200 and "named like EXTRACTOR_*_KEY" in refused.content.decode()
    moved = change_form(extractor, base_url="https://new.example.org")
    assert browser.post(CHANGE.format(extractor.pk), moved).status_code == 302
    entry = LogEntry.objects.get(object_id=str(extractor.pk))
    assert "Base url" in entry.get_change_message()
