import pytest

from extraction.registry import ADAPTERS

# Each client class once, named by the first adapter that builds it (several may share one: the
# bundled sandbox speaks the generic protocol). From the registry, so that a new adapter's
# client is held to the same contract without being listed here.
CLIENTS = {}
for name, client in ADAPTERS.items():
    CLIENTS.setdefault(client, str(name))


@pytest.fixture(params=list(CLIENTS), ids=list(CLIENTS.values()))
def adapter(request):
    """Each adapter's client class in turn."""
    return request.param
