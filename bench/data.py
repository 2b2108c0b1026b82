"""Fast bulk data for benchmarks: rows generated inside PostgreSQL with generate_series."""

from django.db import connection

from jobtracking.models import ExtractionJob

# Columns every generated job fills; each generator adds its own status-specific ones.
COMMON_COLUMNS = (
    "id, extractor_id, file_id, file_name, content_type, file_sha256, source_url, upload, "
    "options, metadata, attempt, submit_attempts, poll_count, poll_error_count, external_job_id, "
    "external_url, external_status, external_request_id, progress, error_message, "
    "request_fingerprint, updated_at, priority, traceparent"
)


def _common_values(name: str) -> str:
    """SQL for COMMON_COLUMNS; parameters: extractor id, file id prefix."""
    return (
        "gen_random_uuid(), %s, %s || n, '" + name + "' || n || '.pdf', 'application/pdf', '', "
        "'https://files.example.org/' || n || '.pdf', '', '{}', '{}', 1, 1, 3, 0, 'ext-' || n, "
        "'', '', '', 0, '', '', now(), n %% 3, ''"
    )


def _insert(extra_columns: str, extra_values: str, name: str, params: list) -> None:
    table = ExtractionJob._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({COMMON_COLUMNS}, {extra_columns}) "
            f"SELECT {_common_values(name)}, {extra_values} "
            "FROM generate_series(1, %s) AS n",
            params,
        )
        cursor.execute(f"ANALYZE {table}")


def add_terminal_jobs(
    extractor_id: int, count: int, prefix: str, requested_by_id: int | None = None
) -> None:
    """`count` terminal jobs spread over the last 90 days (they have no due_at): mostly
    succeeded, every tenth failed with an error code (a third of each priority)."""
    _insert(
        "status_id, error_code, created_at, completed_at, requested_by_id",
        "CASE WHEN n %% 10 = 0 THEN 'failed' ELSE 'succeeded' END, "
        "CASE WHEN n %% 10 = 0 THEN 'extraction_failed' ELSE '' END, "
        "now() - (n %% 7776000) * interval '1 second', "
        "now() - (n %% 7776000) * interval '1 second' + interval '5 seconds', %s",
        "doc",
        [extractor_id, prefix, requested_by_id, count],
    )


def add_due_jobs(extractor_id: int, count: int, prefix: str) -> None:
    """`count` pending jobs, all due now (a third of each priority)."""
    _insert(
        "status_id, error_code, created_at, due_at, deadline_at",
        "'pending', '', now(), now() - interval '1 second', now() + interval '1 hour'",
        "due",
        [extractor_id, prefix, count],
    )


def add_batch_jobs(
    extractor_id: int, batch_id, count: int, prefix: str, requested_by_id: int, failed_every: int
) -> None:
    """`count` jobs of one batch: every `failed_every`th failed (with an error code), of the
    rest seven in ten succeeded and three in ten still processing."""
    _insert(
        "status_id, error_code, created_at, completed_at, requested_by_id, batch_id",
        "CASE WHEN n %% %s = 0 THEN 'failed' WHEN n %% 10 < 7 THEN 'succeeded' "
        "ELSE 'processing' END, "
        "CASE WHEN n %% %s = 0 THEN 'extraction_failed' ELSE '' END, "
        "now() - n * interval '10 ms', "
        "CASE WHEN n %% %s = 0 OR n %% 10 < 7 THEN now() - n * interval '5 ms' END, %s, %s",
        "batch",
        [
            extractor_id,
            prefix,
            failed_every,
            failed_every,
            failed_every,
            requested_by_id,
            batch_id,
            count,
        ],
    )


def add_finished_jobs_with_history(extractor_id: int, count: int, prefix: str) -> int:
    """`count` terminal jobs (as `add_terminal_jobs`, created within the last two days, as one
    day's purge finds them), each with four status changes and two events, and an inline result
    for each succeeded one. Returns the number of rows written (jobs included)."""
    _insert(
        "status_id, error_code, created_at, completed_at",
        "CASE WHEN n %% 10 = 0 THEN 'failed' ELSE 'succeeded' END, "
        "CASE WHEN n %% 10 = 0 THEN 'extraction_failed' ELSE '' END, "
        "now() - interval '1 minute' - (n %% 172800) * interval '1 second', "
        "now() - interval '1 minute' - (n %% 172800) * interval '1 second' + interval '5 s'",
        "doc",
        [extractor_id, prefix, count],
    )
    jobs = (
        f"FROM {ExtractionJob._meta.db_table} AS j WHERE j.extractor_id = %s "
        "AND j.file_id LIKE %s || '%%'"
    )
    statements = [
        "INSERT INTO jobtracking_jobstatuschange "
        "(job_id, from_status_id, to_status_id, attempt, changed_at, actor_type, reason, details) "
        "SELECT j.id, v.from_status, coalesce(v.to_status, j.status_id), 1, "
        "j.created_at + v.step * interval '1 second', 'system', '', "
        '\'{"external_status": "running"}\' '
        "FROM (VALUES (0, NULL, 'pending'), (1, 'pending', 'submitting'), "
        "(2, 'submitting', 'submitted'), (3, 'submitted', NULL)) "
        "AS v(step, from_status, to_status) "
        f"CROSS JOIN LATERAL (SELECT j.* {jobs}) AS j",
        "INSERT INTO jobtracking_jobevent (event_id, job_id, type, payload, created_at) "
        "SELECT gen_random_uuid(), j.id, v.type, "
        "jsonb_build_object('id', j.id, 'file_id', j.file_id, 'status', j.status_id), "
        "j.created_at FROM (VALUES ('job.created'), ('job.submitted')) AS v(type) "
        f"CROSS JOIN LATERAL (SELECT j.* {jobs}) AS j",
        "INSERT INTO jobtracking_extractionresult (job_id, attempt, payload, payload_file, "
        "content_sha256, size_bytes, page_count, model_version, received_at, made_safe, "
        "original_file, original_sha256) "
        "SELECT j.id, 1, jsonb_build_object('pages', jsonb_build_array(jsonb_build_object("
        "'number', 1, 'text', repeat('Total grant expenditure ' || j.file_id || '. ', 20)))), "
        "'', repeat('0', 64), 1000, 1, 'bench-1', j.completed_at, '[]', '', '' "
        f"{jobs} AND j.status_id = 'succeeded'",
    ]
    written = count
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement, [extractor_id, prefix])
            written += cursor.rowcount
        for table in ("jobstatuschange", "jobevent", "extractionresult"):
            cursor.execute(f"ANALYZE jobtracking_{table}")
    return written
