"""The layering that import-linter cannot see: SQL text appears only in the db layer (shared/db/),
and no module outside it reads the named-query files. (The import contracts themselves run in
`make lint`, from pyproject.toml.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SQL = re.compile(
    r"\b(SELECT\b[\s\S]*\bFROM|INSERT\s+INTO|UPDATE\b[\s\S]*\bSET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX|FUNCTION)"
    r"|ALTER\s+TABLE|pg_notify|FOR\s+UPDATE)\b"
)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def sql_outside_the_db_layer() -> list[str]:
    found = []
    for path in sorted([*(REPO / "services").rglob("*.py"), *(REPO / "shared").rglob("*.py")]):
        rel = path.relative_to(REPO)
        if rel.parts[:2] == ("shared", "db"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            is_text = isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            if is_text and SQL.search(node.value):
                found.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    return found


def test_sql_text_lives_only_in_the_db_layer():
    assert sql_outside_the_db_layer() == []


def test_the_check_finds_sql_where_it_should_not_be(tmp_path):
    # The detector itself: a statement in a string is found, prose in a docstring is not.
    sample = (
        'def f():\n    """We UPDATE things; SELECT carefully FROM the list."""\n    q = "SELECT id FROM t"\n'
    )
    tree = ast.parse(sample)
    skip = _docstrings(tree)
    hits = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and id(n) not in skip and SQL.search(str(n.value))
    ]
    assert hits == ["SELECT id FROM t"]


def test_only_the_db_layer_lists_the_sql_files():
    users = [
        str(p.relative_to(REPO))
        for p in [*(REPO / "services").rglob("*.py"), *(REPO / "shared").rglob("*.py")]
        if p.relative_to(REPO).parts[:2] != ("shared", "db")
        and re.search(r"queries/|migrations/|\.sql\b", p.read_text())
    ]
    assert users == []
