"""The layers hold: `lint-imports` checks pyproject.toml's `[tool.importlinter]` contracts (the one
statement of who may import whom; `make lint` runs it too), and each contract breaks on a back
arrow, shown by adding one to a copy of the packages and linting the copy."""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = {
    contract["id"]: contract["name"]
    for contract in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
}


def lint_imports(root: Path, *contract_ids: str) -> subprocess.CompletedProcess:
    """`lint-imports` on the packages under `root`, wide enough that no line wraps."""
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", "--no-logo", *(f"--contract={c}" for c in contract_ids)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root), "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_layering_contracts_are_all_kept():
    result = lint_imports(ROOT)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in CONTRACTS.values():
        assert f"{name} KEPT" in result.stdout
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


@pytest.fixture(scope="module")
def copy_root(tmp_path_factory) -> Path:
    """The packages and the contracts, copied: a back arrow is added there, never here."""
    root = tmp_path_factory.mktemp("layering")
    for package in ("jobtracking", "extraction"):
        shutil.copytree(
            ROOT / package,
            root / package,
            ignore=shutil.ignore_patterns("__pycache__", "static", "samples"),
        )
    shutil.copy(ROOT / "pyproject.toml", root)
    return root


# (the file that gains the import, the module it imports, the contract that must break)
BACK_ARROWS = [
    ("extraction/registry.py", "jobtracking.models", "extraction-knows-no-jobs"),
    # The arrows this layout removed: services, selectors and the domain reaching up.
    ("jobtracking/services/creation.py", "jobtracking.engine.dispatcher", "jobtracking-layers"),
    ("jobtracking/selectors.py", "jobtracking.engine.tasks", "jobtracking-layers"),
    ("jobtracking/infra/metrics.py", "jobtracking.models", "jobtracking-layers"),
    ("jobtracking/events.py", "jobtracking.selectors", "jobtracking-layers"),
    ("jobtracking/models.py", "jobtracking.services.transitions", "jobtracking-layers"),
    ("jobtracking/states.py", "jobtracking.api.views", "jobtracking-layers"),
    ("jobtracking/selectors.py", "jobtracking.services.creation", "jobtracking-layers"),
    ("jobtracking/services/operations.py", "jobtracking.admin.jobs", "jobtracking-layers"),
    (
        "jobtracking/engine/tasks.py",
        "jobtracking.management.commands.run_workers",
        "jobtracking-layers",
    ),
    ("jobtracking/admin/jobs.py", "jobtracking.api.views", "jobtracking-layers"),
    (
        "jobtracking/migrations/0001_initial.py",
        "jobtracking.models",
        "migrations-import-no-application-module",
    ),
    (
        "extraction/migrations/0001_initial.py",
        "extraction.registry",
        "migrations-import-no-application-module",
    ),
]


@pytest.mark.parametrize(("path", "imported", "contract_id"), BACK_ARROWS)
def test_layering_contracts_break_on_a_back_arrow(copy_root, path, imported, contract_id):
    assert (copy_root / path).exists(), path
    kept = lint_imports(copy_root, contract_id)
    assert kept.returncode == 0, kept.stdout + kept.stderr

    importer = path.removesuffix(".py").replace("/", ".")
    source = (copy_root / path).read_text()
    (copy_root / path).write_text(f"{source}\nimport {imported}\n")
    try:
        broken = lint_imports(copy_root, contract_id)
    finally:
        (copy_root / path).write_text(source)
    assert broken.returncode != 0, broken.stdout
    assert f"{CONTRACTS[contract_id]} BROKEN" in broken.stdout, broken.stdout
    assert f"{importer} -> {imported}" in broken.stdout, broken.stdout
