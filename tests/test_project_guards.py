"""Guards of the project as a whole, each shown to see what it guards: every model change has
its migration (what `make lint` checks, run by `make test` too), and product tests import
nothing from `bench/` (opt-in benchmarks, whose fast data writers may lag the models)."""

import ast
import io
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import call_command

TESTS = Path(__file__).resolve().parent
# Made from its models, without migrations, for the tests alone (`tests/testapp`).
TEST_APP = "testapp"


def missing_migrations(*labels: str) -> str:
    """What `makemigrations --check --dry-run` would write for these apps; empty if nothing."""
    out = io.StringIO()
    try:
        call_command("makemigrations", *labels, "--check", "--dry-run", stdout=out)
    except SystemExit:
        return out.getvalue() or "changes"
    return ""


@pytest.mark.django_db
def test_every_model_change_has_its_migration():
    labels = [config.label for config in apps.get_app_configs() if config.label != TEST_APP]
    assert not missing_migrations(*labels)
    # Not blind: the test app's models have no migration, and that is seen.
    assert "Create model Specimen" in missing_migrations(TEST_APP)


def bench_imports(source: str) -> list[str]:
    """The `bench` modules this source imports: by `import`, `from … import` (in a function
    too) or `importlib.import_module`."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append(node.args[0].value)
    return [name for name in names if name == "bench" or name.startswith("bench.")]


def test_product_tests_import_nothing_from_bench():
    found = {
        str(path.relative_to(TESTS)): imported
        for path in sorted(TESTS.rglob("*.py"))
        if (imported := bench_imports(path.read_text()))
    }
    assert not found, f"tests importing bench: {found}"


def test_bench_imports_are_seen_wherever_they_are():
    source = (
        "import benchmarks, tests.bench\n"
        "from tests.bench import x\n"
        "def test_it():\n"
        "    from bench.data import add_terminal_jobs\n"
        "    import bench.api as api\n"
        "    importlib.import_module('bench.admin')\n"
        "    import_module('bench')\n"
    )
    assert sorted(bench_imports(source)) == ["bench", "bench.admin", "bench.api", "bench.data"]


# What `make run` installs (`pip install -e .`, no extras) must be all the service imports.
PRODUCT = ("config", "extraction", "jobtracking", "manage.py")


def top_level_imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def distributions_of(requirements: list[str]) -> set[str]:
    """The import names of these requirements' distributions (from their installed records)."""
    names = set()
    for requirement in requirements:
        name = re.split(r"[<>=!\[ ;]", requirement, maxsplit=1)[0]
        found = metadata.distribution(name)
        top = found.read_text("top_level.txt")
        names |= set(top.split()) if top else {name.replace("-", "_").lower()}
        names |= {
            str(path).split("/")[0].removesuffix(".py")
            for path in found.files or []
            if "/" in str(path) or str(path).endswith(".py")
        } - {"..", "__pycache__"}
    return names


def test_the_service_imports_nothing_only_the_test_extra_installs():
    project = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["project"]
    runtime = distributions_of(project["dependencies"])
    test_only = distributions_of(project["optional-dependencies"]["test"]) - runtime
    sources = [
        path
        for name in PRODUCT
        for path in (
            [TESTS.parent / name] if name.endswith(".py") else (TESTS.parent / name).rglob("*.py")
        )
    ]
    found = {
        str(path.relative_to(TESTS.parent)): used
        for path in sources
        if (used := top_level_imports(path.read_text()) & test_only)
    }
    assert found == {}
    # Not blind: a module importing a test-only package is seen.
    assert top_level_imports("from hypothesis import given\n") & test_only == {"hypothesis"}


def test_make_run_installs_the_service_without_the_test_extra():
    makefile = (TESTS.parent / "Makefile").read_text()
    run_needs = re.search(r"^run: (.+)$", makefile, re.MULTILINE).group(1).split()
    assert run_needs == ["$(RUN_INSTALLED)"]
    recipe = re.search(r"^\$\(RUN_INSTALLED\):.*\n((?:\t.*\n)+)", makefile, re.MULTILINE).group(1)
    assert "pip install --quiet -e .\n" in recipe and "[test]" not in recipe
