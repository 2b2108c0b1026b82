"""Actions that reveal a secret or send signed or authenticated requests need change permission:
staff who may only view a list are neither offered them nor able to post them."""

import pytest
from django.contrib.admin.models import LogEntry

from jobtracking.models import WebhookSubscription
from tests.factories import ExtractorFactory, WebhookSubscriptionFactory
from tests.jobtracking.admin.conftest import staff

pytestmark = pytest.mark.django_db

GUARDED = [
    ("/admin/jobtracking/webhooksubscription/", "view_webhooksubscription", "rotate_secret"),
    ("/admin/jobtracking/webhooksubscription/", "view_webhooksubscription", "send_test"),
    ("/admin/extraction/extractor/", "view_extractor", "check_connection"),
]


@pytest.fixture(autouse=True)
def _rows():
    # The admin offers actions only on a list with rows.
    WebhookSubscriptionFactory()
    ExtractorFactory()


@pytest.mark.parametrize(("url", "view", "action"), GUARDED)
def test_a_view_only_user_is_not_offered_the_action(client, url, view, action):
    client.force_login(staff(view))
    page = client.get(url)
    assert page.status_code == 200
    assert f'value="{action}"' not in page.content.decode()


@pytest.mark.parametrize(("url", "view", "action"), GUARDED)
def test_a_change_user_is_offered_the_action(client, url, view, action):
    # (Subscriptions of every owner are listed to those who see every client's jobs.)
    client.force_login(staff(view, view.replace("view_", "change_"), "view_all_extractionjobs"))
    assert f'value="{action}"' in client.get(url).content.decode()


def test_a_view_only_user_posting_rotate_changes_no_secret_and_sees_none(client):
    subscription = WebhookSubscription.objects.get()
    client.force_login(staff("view_webhooksubscription"))
    response = client.post(
        "/admin/jobtracking/webhooksubscription/",
        {"action": "rotate_secret", "_selected_action": [subscription.pk]},
        follow=True,
    )
    assert "whsec_" not in response.content.decode()
    assert WebhookSubscription.objects.get().secret_version == subscription.secret_version
    assert not LogEntry.objects.filter(object_id=str(subscription.pk)).exists()


def test_a_view_only_user_posting_check_connection_sends_nothing(client):
    extractor = ExtractorFactory(base_url="http://127.0.0.1:9")
    client.force_login(staff("view_extractor"))
    response = client.post(
        "/admin/extraction/extractor/",
        {"action": "check_connection", "_selected_action": [extractor.pk]},
        follow=True,
    )
    assert f"{extractor.slug}:" not in response.content.decode()
    assert not LogEntry.objects.filter(object_id=str(extractor.pk)).exists()
