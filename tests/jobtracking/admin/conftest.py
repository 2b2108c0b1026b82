import pytest
from django.contrib.auth.models import Permission

from tests.factories import UserFactory

JOBS = "/admin/jobtracking/extractionjob/"
# Staff who look after every client's jobs.
OPERATOR = ("view_extractionjob", "view_all_extractionjobs", "manage_all_extractionjobs")


def staff(*codenames: str):
    user = UserFactory(username=f"staff-{'-'.join(codenames) or 'none'}", is_staff=True)
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


@pytest.fixture
def root_client(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client
