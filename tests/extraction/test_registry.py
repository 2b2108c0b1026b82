from datetime import timedelta

from extraction.clients.azure_di import AzureDocumentIntelligenceClient
from extraction.clients.base import ExtractorClient
from extraction.clients.http_async import HttpAsyncClient
from extraction.errors import REQUEUE_ADVICE, ErrorCode
from extraction.models import Adapter, Extractor
from extraction.registry import ADAPTERS, get_client, service_fetches_source


def extractor(pk: int, adapter: str, **fields) -> Extractor:
    return Extractor(pk=pk, slug=f"x{pk}", adapter=adapter, base_url="http://127.0.0.1:9", **fields)


def test_get_client_builds_the_adapter_for_each_protocol():
    assert isinstance(get_client(extractor(1, Adapter.AZURE_DI)), AzureDocumentIntelligenceClient)
    assert isinstance(get_client(extractor(2, Adapter.HTTP_ASYNC)), HttpAsyncClient)
    assert isinstance(get_client(extractor(3, Adapter.SANDBOX)), HttpAsyncClient)


def test_get_client_reuses_one_session_until_the_configuration_changes(monkeypatch):
    monkeypatch.setenv("EXTRACTOR_REGISTRY_TEST_KEY", "first-key")
    row = extractor(10, Adapter.HTTP_ASYNC, api_key_env="EXTRACTOR_REGISTRY_TEST_KEY")
    first = get_client(row)
    assert get_client(row) is first
    assert first.config.api_key == "first-key"

    monkeypatch.setenv("EXTRACTOR_REGISTRY_TEST_KEY", "rotated-key")
    rotated = get_client(row)
    assert rotated is not first and rotated.config.api_key == "rotated-key"

    row.request_timeout = timedelta(seconds=3)
    assert get_client(row).config.read_timeout == 3


def test_extractor_without_key_variable_sends_no_key(monkeypatch):
    assert get_client(extractor(20, Adapter.HTTP_ASYNC)).config.api_key == ""


def unmatched(choices, registry) -> tuple[set[str], set[str]]:
    """Adapters an extractor may name that no client serves, and clients registered under a
    name no extractor may take."""
    return set(choices) - set(registry), set(registry) - set(choices)


def test_every_adapter_choice_has_a_client_and_every_client_a_choice():
    assert unmatched(Adapter.values, ADAPTERS) == (set(), set())
    assert all(issubclass(client, ExtractorClient) for client in ADAPTERS.values())
    # Not blind either way: a choice added alone, or a client registered alone, is named.
    assert unmatched([*Adapter.values, "specimen_protocol"], ADAPTERS) == (
        {"specimen_protocol"},
        set(),
    )
    registered = {**ADAPTERS, "specimen_protocol": HttpAsyncClient}
    assert unmatched(Adapter.values, registered) == (set(), {"specimen_protocol"})


def test_every_error_code_says_whether_a_requeue_may_help():
    assert set(REQUEUE_ADVICE) == set(ErrorCode.values)
    assert all(advice.endswith(".") for _, advice in REQUEUE_ADVICE.values())
    assert not REQUEUE_ADVICE[ErrorCode.EXTRACTION_FAILED][0]
    assert REQUEUE_ADVICE[ErrorCode.EXTRACTOR_UNAVAILABLE][0]


def test_the_service_fetches_sources_only_for_extractors_that_do_not_report_them():
    assert service_fetches_source(Adapter.AZURE_DI)
    assert not service_fetches_source(Adapter.HTTP_ASYNC)
    assert not service_fetches_source(Adapter.SANDBOX)
