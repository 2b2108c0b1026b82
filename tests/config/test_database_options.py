"""The database options the environment sets (`config.settings.base.database_from_env`)."""

import pytest

from config.settings.base import database_from_env


@pytest.mark.parametrize(
    ("value", "threshold"), [(None, 0), ("1", 0), ("on", 0), ("0", None), ("off", None)]
)
def test_db_prepared_statements_sets_psycopgs_prepare_threshold(monkeypatch, value, threshold):
    monkeypatch.setenv("DATABASE_URL", "postgres://jobs@db.example.org/jobs")
    if value is None:
        monkeypatch.delenv("DB_PREPARED_STATEMENTS", raising=False)
    else:
        monkeypatch.setenv("DB_PREPARED_STATEMENTS", value)
    # 0: a statement is prepared on its first run; None: never.
    assert database_from_env()["OPTIONS"]["prepare_threshold"] == threshold


def test_sqlite_has_no_prepare_threshold(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'db.sqlite3'}")
    assert "prepare_threshold" not in database_from_env()["OPTIONS"]
