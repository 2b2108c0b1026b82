"""A small per-process memory of recent lookups, for reads every API request makes (its token
and user, with the permissions Django caches on the user; the extractor it names) that change
rarely. An entry lives `API_LOOKUP_CACHE_SECONDS`: a revoked token, a deactivated user, a changed
permission or extractor takes effect within that time in every process."""

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from django.conf import settings

MAX_ENTRIES = 1000


class Recent:
    def __init__(self) -> None:
        self.entries: dict[Hashable, tuple[float, Any]] = {}
        self.lock = threading.Lock()

    def get(self, key: Hashable, load: Callable[[], Any]) -> Any:
        """The value remembered for `key`, or `load()`'s (remembered unless it is None)."""
        now = time.monotonic()
        with self.lock:
            entry = self.entries.get(key)
        if entry is not None and entry[0] > now:
            return entry[1]
        value = load()
        if value is not None and settings.API_LOOKUP_CACHE_SECONDS > 0:
            with self.lock:
                if len(self.entries) >= MAX_ENTRIES:
                    self.entries.clear()
                self.entries[key] = (now + settings.API_LOOKUP_CACHE_SECONDS, value)
        return value

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
