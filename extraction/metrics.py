"""Extractor call metrics (latency, outcomes by error class), recorded in the calling process.
With PROMETHEUS_MULTIPROC_DIR set, every process on a machine writes there and `/metrics`
aggregates them."""

from prometheus_client import Counter, Histogram

EXTRACTOR_CALL_SECONDS = Histogram(
    "jobtracking_extractor_call_seconds",
    "Duration of calls to extractors.",
    ["adapter", "operation"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
EXTRACTOR_CALL_ERRORS = Counter(
    "jobtracking_extractor_call_errors_total",
    "Failed calls to extractors by error class.",
    ["adapter", "operation", "error_class"],
)
