"""The product uses Django's public API only: its private names change between releases without
notice. An import of a private name (one with a leading underscore, or from a private module)
fails here, and so does an attribute with a leading underscore that the product does not define
itself, but those listed in `ALLOWED` with their reasons."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = [
    path
    for package in ("config", "extraction", "jobtracking")
    for path in sorted((ROOT / package).rglob("*.py"))
    if "migrations" not in path.parts
]
ALLOWED = {
    "_meta": "documented: the Model _meta API",
    "_state": "documented: Model instance reference, `_state.adding`",
    "_replace": "documented: a named tuple's method",
    "_raw_delete": "private; retention's one DELETE without cascade collection, which the "
    "public delete() does by loading every row it cascades to (covered by tests/jobtracking/"
    "services/test_retention.py, which fails should it change)",
}
# urllib3's, not Django's: the extractor transport takes a pool's connection and gives it back
# itself, since the public `urlopen` would also write the request and read the answer
# (tests/extraction/test_extractor_transport.py fails should they change; urllib3 is pinned < 3).
ALLOWED |= dict.fromkeys(
    ("_get_conn", "_put_conn", "_prepare_proxy"), "private; urllib3's pool, see above"
)


def trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in PRODUCT}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django"):
            modules = node.module.split(".")
            names = [alias.name for alias in node.names]
            found += [f"{node.module}.{name}" for name in names if private(name)]
            if any(private(part) for part in modules):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [
                alias.name
                for alias in node.names
                if alias.name.startswith("django") and any(map(private, alias.name.split(".")))
            ]
    return found


def defined_names(forest) -> set[str]:
    """Every private name the product defines: functions, classes, attributes it assigns."""
    names = set()
    for tree in forest:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name | ast.arg):
                names.add(node.id if isinstance(node, ast.Name) else node.arg)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.rsplit(".", 1)[-1])
    return {name for name in names if private(name)}


def foreign_private_attributes(tree: ast.Module, ours: set[str]) -> list[str]:
    return [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and private(node.attr)
        and node.attr not in ours | ALLOWED.keys()
    ]


def test_the_product_imports_no_private_django_name():
    problems = {
        str(path.relative_to(ROOT)): private_imports(tree)
        for path, tree in trees().items()
        if private_imports(tree)
    }
    assert problems == {}


def test_the_product_reads_no_private_attribute_it_does_not_define():
    forest = trees()
    ours = defined_names(forest.values())
    problems = {
        str(path.relative_to(ROOT)): found
        for path, tree in forest.items()
        if (found := foreign_private_attributes(tree, ours))
    }
    assert problems == {}


@pytest.mark.parametrize(
    "source",
    [
        "from django.db.models.base import _DEFERRED",
        "from django.db.backends._utils import CursorWrapper",
        "import django.db._private",
    ],
)
def test_a_private_import_is_caught(source):
    assert private_imports(ast.parse(source))


def test_a_private_attribute_of_django_is_caught():
    tree = ast.parse("def f(field):\n    return field._get_default()\n")
    assert foreign_private_attributes(tree, defined_names([tree])) == ["_get_default"]
    documented = ast.parse("def f(obj):\n    return obj._meta, obj._state.adding\n")
    assert foreign_private_attributes(documented, set()) == []
