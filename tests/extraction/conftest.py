import pytest

from extraction.clients.azure_di import AzureDocumentIntelligenceClient
from extraction.clients.http_async import HttpAsyncClient

ADAPTERS = {"http_async": HttpAsyncClient, "azure_di": AzureDocumentIntelligenceClient}


@pytest.fixture(params=sorted(ADAPTERS))
def adapter(request):
    """Each HTTP adapter in turn."""
    return ADAPTERS[request.param]
