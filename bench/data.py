"""Fast bulk data for benchmarks: rows generated inside PostgreSQL with generate_series."""

from django.db import connection

from jobtracking.models import ExtractionJob


def add_terminal_jobs(
    extractor_id: int, count: int, prefix: str, requested_by_id: int | None = None
) -> None:
    """`count` terminal jobs spread over the last 90 days (they have no due_at): mostly
    succeeded, every tenth failed with an error code."""
    table = ExtractionJob._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (
                id, extractor_id, status_id, file_id, file_name, content_type, file_sha256,
                source_url, upload, options, metadata, attempt, submit_attempts, poll_count,
                poll_error_count, external_job_id, external_url, external_status,
                external_request_id, progress, error_code, error_message, created_at,
                completed_at, updated_at, requested_by_id, request_fingerprint
            )
            SELECT
                gen_random_uuid(), %s, CASE WHEN n %% 10 = 0 THEN 'failed' ELSE 'succeeded' END,
                %s || n, 'doc' || n || '.pdf',
                'application/pdf', '', 'https://files.example.org/' || n || '.pdf', '', '{{}}',
                '{{}}', 1, 1, 3, 0, 'ext-' || n, '', 'succeeded', '', 100,
                CASE WHEN n %% 10 = 0 THEN 'extraction_failed' ELSE '' END, '',
                now() - (n %% 7776000) * interval '1 second',
                now() - (n %% 7776000) * interval '1 second' + interval '5 seconds', now(), %s, ''
            FROM generate_series(1, %s) AS n
            """,
            [extractor_id, prefix, requested_by_id, count],
        )
        cursor.execute(f"ANALYZE {table}")


def add_due_jobs(extractor_id: int, count: int, prefix: str) -> None:
    """`count` pending jobs, all due now."""
    table = ExtractionJob._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (
                id, extractor_id, status_id, file_id, file_name, content_type, file_sha256,
                source_url, upload, options, metadata, attempt, submit_attempts, poll_count,
                poll_error_count, external_job_id, external_url, external_status,
                external_request_id, progress, error_code, error_message, created_at,
                due_at, deadline_at, updated_at, request_fingerprint
            )
            SELECT
                gen_random_uuid(), %s, 'pending', %s || n, 'due' || n || '.pdf',
                'application/pdf', '', 'https://files.example.org/due' || n || '.pdf', '', '{{}}',
                '{{}}', 1, 0, 0, 0, '', '', '', '', 0, '', '', now(), now() - interval '1 second',
                now() + interval '1 hour', now(), ''
            FROM generate_series(1, %s) AS n
            """,
            [extractor_id, prefix, count],
        )
        cursor.execute(f"ANALYZE {table}")
