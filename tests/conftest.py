import pytest

from jobtracking.services import Actor
from tests.factories import ExtractorFactory, UserFactory


@pytest.fixture
def extractor(db):
    return ExtractorFactory()


@pytest.fixture
def client_user(db):
    return UserFactory(username="api-client")


@pytest.fixture
def api_actor(client_user):
    return Actor("api", client_user)


@pytest.fixture
def seeded_statuses(transactional_db):
    """Transactional tests flush every table after each test, the migration's seed data too."""
    from jobtracking.models import JobStatus
    from jobtracking.states import STATUSES

    JobStatus.objects.bulk_create(
        [
            JobStatus(code=code, label=label, terminal=terminal, description=text, position=i)
            for i, (code, label, terminal, text) in enumerate(STATUSES)
        ],
        ignore_conflicts=True,
    )
