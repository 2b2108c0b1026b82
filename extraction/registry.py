"""Builds the client for an Extractor row: the one way `jobtracking` reaches an extractor."""

import threading
from typing import Any

from django.conf import settings

from extraction.clients.azure_di import AzureDocumentIntelligenceClient
from extraction.clients.base import ClientConfig, ExtractorClient
from extraction.clients.http_async import HttpAsyncClient
from extraction.models import Adapter, Extractor
from extraction.results import Document

ADAPTERS: dict[str, type[ExtractorClient]] = {
    Adapter.AZURE_DI: AzureDocumentIntelligenceClient,
    Adapter.HTTP_ASYNC: HttpAsyncClient,
    Adapter.SANDBOX: HttpAsyncClient,
}


def result_document(adapter: str, payload: Any) -> Document:
    """A stored result of an extractor with this adapter, in the one shape
    (`extraction.results`)."""
    return ADAPTERS[adapter].document(payload)


def service_fetches_source(adapter: str) -> bool:
    """Whether the service fetches a URL job's source itself for an extractor with this adapter
    (it does not report the document it extracted: `ExtractorClient.reports_document`)."""
    return not ADAPTERS[adapter].reports_document


def billable_pages(adapter: str, payload: Any, content_type: str) -> int:
    """The pages an extractor with this adapter bills for a stored result, by its own rules."""
    return ADAPTERS[adapter].billable_pages(payload, content_type)


_clients: dict[int, tuple[ClientConfig, ExtractorClient]] = {}
_lock = threading.Lock()


def client_config(extractor: Extractor) -> ClientConfig:
    return ClientConfig(
        base_url=extractor.base_url,
        model_id=extractor.model_id,
        api_key=extractor.api_key(),
        connect_timeout=min(5.0, extractor.request_timeout.total_seconds()),
        read_timeout=extractor.request_timeout.total_seconds(),
        max_response_bytes=settings.EXTRACTOR_MAX_RESPONSE_BYTES,
        pool_size=settings.EXTRACTOR_POOL_SIZE,
    )


def get_client(extractor: Extractor) -> ExtractorClient:
    """The client for this extractor, reused (one pooled session per extractor) until its
    configuration or key changes."""
    config = client_config(extractor)
    with _lock:
        cached = _clients.get(extractor.pk)
        if cached is None or cached[0] != config:
            cached = (config, ADAPTERS[extractor.adapter](config))
            _clients[extractor.pk] = cached
        return cached[1]
