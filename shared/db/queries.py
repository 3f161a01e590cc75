"""Named SQL blocks from shared/db/queries/*.sql, loaded once.

A block starts with a `-- name: <name>` line and runs until the next one.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, str]:
    blocks: dict[str, str] = {}
    folder = resources.files("shared.db") / "queries"
    for f in sorted(folder.iterdir(), key=lambda p: p.name):
        if not f.name.endswith(".sql"):
            continue
        text = f.read_text(encoding="utf-8")
        marks = list(_NAME.finditer(text))
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            body = text[m.end() : end].strip()
            if m.group(1) in blocks:
                raise ValueError(f"duplicate query name {m.group(1)!r} in {f.name}")
            blocks[m.group(1)] = body
    return blocks


class _Queries(dict[str, str]):
    def __getattr__(self, name: str) -> str:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no SQL block named {name!r}") from None


Q = _Queries(_load())
