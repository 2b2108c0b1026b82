"""Structured logs: the job being processed is attached to every line written meanwhile."""

import contextlib
import contextvars
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from jobtracking.infra import tracing

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "job_log_context", default=None
)
CONTEXT_FIELDS = ("job_id", "attempt", "extractor", "event", "trace_id", "span_id")


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Attach fields (job_id, attempt, extractor, event…) to the log lines written inside."""
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def job_log_context(job, event: str):
    """The job's fields, with its trace (the span that created it: searching the trace id finds
    every line about the job, whichever process wrote it)."""
    ids = tracing.trace_ids(job.traceparent)
    traced = {"trace_id": ids[0], "span_id": ids[1]} if ids else {}
    return log_context(
        job_id=str(job.pk),
        attempt=job.attempt,
        extractor=job.extractor.slug,
        event=event,
        **traced,
    )


class JobContextFilter(logging.Filter):
    """Each line's job fields, and its trace: the job's, or else the current span's."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _context.get() or {}
        if "trace_id" not in context and (ids := tracing.current_ids()):
            context = {**context, "trace_id": ids[0], "span_id": ids[1]}
        for name in CONTEXT_FIELDS:
            setattr(record, name, context.get(name))
        shown = " ".join(str(context[name]) for name in ("job_id", "event") if name in context)
        if "trace_id" in context:
            shown += f" trace_id={context['trace_id']} span_id={context['span_id']}"
        shown = shown.strip()
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
