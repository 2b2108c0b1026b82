"""`extraction` knows nothing about jobs: no module of it imports `jobtracking`, so imports flow
one way (`jobtracking` reaches an extractor through `extraction.registry`)."""

import ast
from pathlib import Path

import extraction

ROOT = Path(extraction.__file__).parent


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_extraction_imports_nothing_from_jobtracking():
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in imported_modules(path) if name.split(".")[0] == "jobtracking"
        )
        for path in ROOT.rglob("*.py")
    }
    assert not {path: names for path, names in offenders.items() if names}
