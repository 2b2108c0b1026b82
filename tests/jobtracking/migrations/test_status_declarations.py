"""The migrations bring a database that already holds jobs to the declared statuses, and a new
status's migration (what `makemigrations` writes for it, plus its row) applies to such a database.

One test, so the migrations run once: django-test-migrations drops every table, migrates to
0002, and the test then migrates forward to the latest (the `migration_test` mark selects it).
"""

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.questioner import NonInteractiveMigrationQuestioner

from jobtracking import states
from jobtracking.models import status_in
from tests.jobtracking.test_states import CONDITIONED, ON_HOLD, WITH_HOLD

pytestmark = pytest.mark.migration_test


def latest() -> list[tuple[str, str]]:
    return MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes()


def declared_rows(statuses) -> list[tuple[str, str, bool, str]]:
    return [(s.code, s.label, s.terminal, s.meaning) for s in statuses]


def with_hold(state):
    """`state` as `makemigrations` would see the models once `ON_HOLD` is declared: the partial
    indexes and the constraint over the sets derived with it (`models.status_in`)."""
    changed = state.clone()
    options = changed.models["jobtracking", "extractionjob"].options
    for kind in ("indexes", "constraints"):
        items = []
        for item in options[kind]:
            if item.name in CONDITIONED:
                item = item.clone()
                item.condition = status_in(getattr(WITH_HOLD, CONDITIONED[item.name]))
            items.append(item)
        options[kind] = items
    return changed


def test_migrations_bring_a_database_with_jobs_to_the_declared_statuses(migrator):
    before = migrator.apply_initial_migration(("jobtracking", "0002_seed_job_statuses"))
    Extractor = before.apps.get_model("extraction", "Extractor")
    Job = before.apps.get_model("jobtracking", "ExtractionJob")
    extractor = Extractor.objects.create(
        slug="old", name="Old", adapter="sandbox", base_url="https://extractor.example.org/"
    )
    jobs = {
        Job.objects.create(
            extractor=extractor,
            status_id=code,
            file_id=f"file-{code}",
            source_url=f"https://files.example.org/{code}.pdf",
        ).pk: code
        for code in (states.PENDING, states.PROCESSING, states.SUCCEEDED, states.CANCELLED)
    }

    after = migrator.apply_tested_migration(latest())

    JobStatus = after.apps.get_model("jobtracking", "JobStatus")
    Job = after.apps.get_model("jobtracking", "ExtractionJob")
    rows = JobStatus.objects.order_by("position").values_list(
        "code", "label", "terminal", "description"
    )
    assert list(rows) == declared_rows(states.STATUSES)
    assert dict(Job.objects.values_list("pk", "status")) == jobs

    # A status added later: what `makemigrations` writes for it, plus the data migration that
    # inserts its row, on this database with its jobs. PostgreSQL's DDL is transactional: all
    # of it is rolled back at the end.
    changes = MigrationAutodetector(
        after, with_hold(after), NonInteractiveMigrationQuestioner()
    ).changes(graph=MigrationLoader(None).graph)
    (migration,) = changes["jobtracking"]
    with transaction.atomic():
        with connection.schema_editor(atomic=False) as editor:
            migration.apply(after, editor)
        JobStatus.objects.create(
            code=ON_HOLD.code,
            label=ON_HOLD.label,
            terminal=False,
            description=ON_HOLD.meaning,
            position=len(WITH_HOLD.statuses) - 1,
        )
        assert dict(Job.objects.values_list("pk", "status")) == jobs
        # The file of the pending job is held by it: a held job of the same file is refused.
        with pytest.raises(IntegrityError, match="job_one_active_per_file"), transaction.atomic():
            Job.objects.create(
                extractor_id=extractor.pk,
                status_id=ON_HOLD.code,
                file_id=f"file-{states.PENDING}",
                source_url="https://files.example.org/again.pdf",
            )
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE indexname = ANY(%s) AND indexdef LIKE %s",
                [list(CONDITIONED), f"%'{ON_HOLD.code}'%"],
            )
            covering = {name for (name,) in cursor.fetchall()}
        assert covering == {name for name, derived in CONDITIONED.items() if derived == "active"}
        transaction.set_rollback(True)
