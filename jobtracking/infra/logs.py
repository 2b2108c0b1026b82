"""Structured logs: the job being processed is attached to every line written meanwhile."""

import contextlib
import contextvars
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "job_log_context", default=None
)
CONTEXT_FIELDS = ("job_id", "attempt", "extractor", "event")


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Attach fields (job_id, attempt, extractor, event…) to the log lines written inside."""
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def job_log_context(job, event: str):
    return log_context(
        job_id=str(job.pk), attempt=job.attempt, extractor=job.extractor.slug, event=event
    )


class JobContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        context = _context.get() or {}
        for name in CONTEXT_FIELDS:
            setattr(record, name, context.get(name))
        shown = " ".join(str(context[name]) for name in ("job_id", "event") if name in context)
        record.job_prefix = f"[{shown}] " if shown else ""
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)
