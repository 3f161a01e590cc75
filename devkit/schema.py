"""shared/db/schema.sql: the schema the migrations make, in one file a reader can open (`make schema`).

The migrations (shared/db/migrations/) are the schema's source, and some of them edit a function's
text by exact match (`queueflow.edit_function`), so the current definition of an object could only
be found by replaying them. `build` replays them into an empty database one version at a time,
reads the catalogs after each, and prints what the last version leaves in one fixed order:

- schemas, extensions and types;
- each table with its columns and constraints, then its indexes and statistics objects;
- functions (`pg_get_functiondef`), triggers, views, sequences, comments.

Each object's header names the migration that made it or last changed its text. Owners,
privileges, OIDs, server settings and the rows of `queueflow.schema_migrations` are left out, and
everything is sorted here rather than by the database's collation, so the text depends only on the
migration files and PostgreSQL's major version (whose catalog functions print the definitions). An
object of a kind this module cannot print (a range type, a policy, a rule, a partitioned table...)
is an `UnsupportedObject` error naming it, never left out silently.

`python -m devkit.schema` writes the file from a throwaway cluster; `--check` compares instead and
exits 1 when the file differs; `--server DSN` uses an existing server (a database is made on it and
dropped). tests/db/test_schema_file.py runs the same `build` against the test cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from devkit import REPO
from devkit.pg import PgServer, throwaway_cluster
from shared.db.migrate import apply_migrations, migration_files

SCHEMA_FILE = REPO / "shared" / "db" / "schema.sql"
BOOKKEEPING = "shared/db/migrate.py"  # the origin of what exists before the first migration

# Sections in file order, with their headings.
SECTIONS = {
    "schema": "Schemas",
    "extension": "Extensions",
    "type": "Types",
    "table": "Tables, each with its columns and constraints, then its indexes",
    "function": "Functions",
    "trigger": "Triggers, by table",
    "view": "Views",
    "sequence": "Sequences",
    "comment": "Comments",
}
_BANNER = "-- " + "=" * 97
_RULE = "-- " + "-" * 97
_RULED = ("Table ", "Function ", "Procedure ", "View ", "Materialized view ")  # long: a rule above and below

# What counts as the application's schemas: not the system's (pg_catalog, information_schema, and
# pg_toast, pg_temp_N..., since `pg_` names are reserved for the system).
_USER_NSP = "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'"


def _not_extension_member(catalog: str, oid: str) -> str:
    return (
        f"NOT EXISTS (SELECT FROM pg_depend e WHERE e.classid = '{catalog}'::regclass"
        f" AND e.objid = {oid} AND e.deptype = 'e')"
    )


class UnsupportedObject(RuntimeError):
    """The schema holds an object this module cannot print; extend devkit/schema.py for it."""


@dataclass(frozen=True)
class Item:
    """One object's statements. `section` and `order` place it in the file; `title` heads it and,
    with the section, names it across versions (for the migration that last changed it)."""

    section: str
    order: tuple[str, ...]
    title: str
    sql: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.section, self.title)


async def read_schema(conn: asyncpg.Connection) -> list[Item]:
    """Every object of the application's schemas on `conn`'s database, in file order. (Leaves the
    connection's search_path empty, so that every name is printed schema-qualified.)"""
    await conn.execute("SET search_path = ''")
    await _refuse_unsupported(conn)
    items = [
        *await _schemas(conn),
        *await _extensions(conn),
        *await _types(conn),
        *await _relations(conn),
        *await _functions(conn),
        *await _comments(conn),
    ]
    keys = [item.key for item in items]
    if len(set(keys)) != len(keys):
        raise UnsupportedObject(
            f"two objects print the same title: {sorted(k for k in keys if keys.count(k) > 1)}"
        )
    return sorted(items, key=lambda item: (list(SECTIONS).index(item.section), item.order))


async def build(dsn: str) -> str:
    """Replay the migrations into the empty database at `dsn`, one version at a time, and answer the
    text of shared/db/schema.sql."""
    migrator = await asyncpg.connect(dsn)
    reader = await asyncpg.connect(dsn)
    try:
        # Before the first migration: only the bookkeeping that apply_migrations makes itself.
        await apply_migrations(migrator, through="")
        last = {item.key: item for item in await read_schema(reader)}
        origin = dict.fromkeys(last, BOOKKEEPING)
        versions = [version for version, _ in migration_files()]
        for version in versions:
            await apply_migrations(migrator, through=version)
            now = {item.key: item for item in await read_schema(reader)}
            for key, item in now.items():
                if key not in last or last[key].sql != item.sql:
                    origin[key] = version
            last = now
        major = await reader.fetchval("SELECT current_setting('server_version_num')::int / 10000")
    finally:
        await reader.close()
        await migrator.close()
    return render(list(last.values()), origin, versions, major)


def render(
    items: Sequence[Item], origin: Mapping[tuple[str, str], str], versions: Sequence[str], major: int
) -> str:
    """The file: a header, then each section's items under their headings."""
    span = f"{versions[0]} to {versions[-1]}" if versions else "none"
    lines = [
        "-- QueueFlow's schema: what the migrations in shared/db/migrations/ make, from",
        f"-- {span} ({len(versions)} files).",
        "--",
        f"-- Generated by `make schema` (devkit/schema.py) from PostgreSQL {major}'s catalogs; do not edit it.",
        "-- tests/db/test_schema_file.py fails when the migrations and this file differ.",
        "--",
        "-- It is for reading and review: databases are made by the migrations (`queueflow migrate`), never",
        "-- from this file, and its statements are in reading order, not in an order that could be applied.",
        '-- "(from NNNN_name)" names the migration that made an object or last changed its text. Left out:',
        "-- owners, privileges and the rows of queueflow.schema_migrations.",
    ]
    section = ""
    for item in items:
        if item.section != section:
            section = item.section
            lines += ["", "", _BANNER, f"-- {SECTIONS[section]}", _BANNER]
        heading = f"-- {item.title} (from {origin[item.key]})"
        if item.title.startswith(_RULED):
            lines += ["", _RULE, heading, _RULE]
        else:
            lines += ["", heading]
        lines.append(item.sql)
    return "\n".join(lines) + "\n"


async def _refuse_unsupported(conn: asyncpg.Connection) -> None:
    rows = await conn.fetch(f"""
        SELECT 'relation ' || c.oid::regclass::text || ' of relkind ' || c.relkind::text
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_USER_NSP} AND c.relkind NOT IN ('r', 'i', 'S', 'v', 'm', 'c')
          AND {_not_extension_member("pg_class", "c.oid")}
        UNION ALL
        SELECT 'row level security on ' || c.oid::regclass::text
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_USER_NSP} AND (c.relrowsecurity OR c.relforcerowsecurity)
        UNION ALL
        SELECT 'policy ' || p.polname || ' on ' || p.polrelid::regclass::text FROM pg_policy p
        UNION ALL
        SELECT 'inheritance of ' || i.inhrelid::regclass::text || ' from ' || i.inhparent::regclass::text
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_USER_NSP}
        UNION ALL
        SELECT 'rule ' || r.rulename || ' on ' || r.ev_class::regclass::text
        FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_USER_NSP} AND r.rulename <> '_RETURN'
        UNION ALL
        SELECT 'aggregate ' || p.oid::regprocedure::text
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE {_USER_NSP} AND p.prokind = 'a' AND {_not_extension_member("pg_proc", "p.oid")}
        UNION ALL
        SELECT 'type ' || format_type(t.oid, NULL) || ' of typtype ' || t.typtype::text
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE {_USER_NSP} AND t.typtype NOT IN ('c', 'd', 'e')
          AND NOT EXISTS (SELECT FROM pg_type a WHERE a.typarray = t.oid)
          AND {_not_extension_member("pg_type", "t.oid")}
        UNION ALL
        SELECT 'operator ' || o.oid::regoperator::text
        FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace
        WHERE {_USER_NSP} AND {_not_extension_member("pg_operator", "o.oid")}
        UNION ALL
        SELECT 'collation ' || l.collname
        FROM pg_collation l JOIN pg_namespace n ON n.oid = l.collnamespace
        WHERE {_USER_NSP} AND {_not_extension_member("pg_collation", "l.oid")}
        UNION ALL
        SELECT 'event trigger ' || t.evtname FROM pg_event_trigger t
        WHERE {_not_extension_member("pg_event_trigger", "t.oid")}""")
    if rows:
        found = ", ".join(sorted(r[0] for r in rows))
        raise UnsupportedObject(
            f"devkit/schema.py cannot print {found}: teach it to (or it would be left out)"
        )


async def _schemas(conn: asyncpg.Connection) -> list[Item]:
    rows = await conn.fetch(f"""
        SELECT quote_ident(n.nspname) AS name FROM pg_namespace n
        WHERE {_USER_NSP} AND n.nspname <> 'public' AND {_not_extension_member("pg_namespace", "n.oid")}""")
    return [Item("schema", (r["name"],), f"Schema {r['name']}", f"CREATE SCHEMA {r['name']};") for r in rows]


async def _extensions(conn: asyncpg.Connection) -> list[Item]:
    rows = await conn.fetch("""
        SELECT quote_ident(x.extname) AS name, quote_ident(n.nspname) AS nsp
        FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace
        WHERE x.extname <> 'plpgsql'""")
    return [
        Item(
            "extension",
            (r["name"],),
            f"Extension {r['name']}",
            f"CREATE EXTENSION {r['name']} WITH SCHEMA {r['nsp']};",
        )
        for r in rows
    ]


async def _types(conn: asyncpg.Connection) -> list[Item]:
    types = await conn.fetch(f"""
        SELECT t.oid, format_type(t.oid, NULL) AS name, t.typtype::text, t.typrelid,
               format_type(t.typbasetype, t.typtypmod) AS base, t.typnotnull, t.typdefault
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        LEFT JOIN pg_class c ON c.oid = t.typrelid
        WHERE {_USER_NSP} AND (t.typtype IN ('d', 'e') OR (t.typtype = 'c' AND c.relkind = 'c'))
          AND {_not_extension_member("pg_type", "t.oid")}""")
    oids = [t["oid"] for t in types]
    labels = _grouped(
        await conn.fetch(
            "SELECT enumtypid AS owner, quote_literal(enumlabel) AS label FROM pg_enum"
            " WHERE enumtypid = ANY($1::oid[]) ORDER BY enumsortorder",
            oids,
        )
    )
    checks = _grouped(
        await conn.fetch(
            "SELECT contypid AS owner, quote_ident(conname) AS name, pg_get_constraintdef(oid, true) AS def"
            " FROM pg_constraint WHERE contypid = ANY($1::oid[])",
            oids,
        )
    )
    fields = _grouped(
        await conn.fetch(
            "SELECT t.oid AS owner, quote_ident(a.attname) AS name, format_type(a.atttypid, a.atttypmod) AS type"
            " FROM pg_type t JOIN pg_attribute a ON a.attrelid = t.typrelid"
            " WHERE t.oid = ANY($1::oid[]) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            oids,
        )
    )
    items = []
    for t in types:
        name, oid = t["name"], t["oid"]
        if t["typtype"] == "e":
            sql = f"CREATE TYPE {name} AS ENUM ({', '.join(r['label'] for r in labels.get(oid, []))});"
        elif t["typtype"] == "c":
            body = ",\n".join(f"    {r['name']} {r['type']}" for r in fields.get(oid, []))
            sql = f"CREATE TYPE {name} AS (\n{body}\n);"
        else:
            parts = [f"CREATE DOMAIN {name} AS {t['base']}"]
            if t["typdefault"] is not None:
                parts.append(f"DEFAULT {t['typdefault']}")
            if t["typnotnull"]:
                parts.append("NOT NULL")
            ranked = sorted(checks.get(oid, []), key=lambda r: str(r["name"]))
            parts += [f"CONSTRAINT {r['name']} {r['def']}" for r in ranked]
            sql = "\n    ".join(parts) + ";"
        items.append(Item("type", (name,), f"Type {name}", sql))
    return items


_CONSTRAINT_RANK = {"p": "0", "u": "1", "c": "2", "f": "3", "x": "4", "t": "5"}


async def _relations(conn: asyncpg.Connection) -> list[Item]:
    """Tables (with their indexes and statistics objects), views, triggers and sequences."""
    rels = await conn.fetch(f"""
        SELECT c.oid, c.oid::regclass::text AS name, c.relkind::text, c.relpersistence::text, c.reloptions
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_USER_NSP} AND c.relkind IN ('r', 'v', 'm', 'S')
          AND {_not_extension_member("pg_class", "c.oid")}""")
    named = {r["oid"]: r for r in rels}
    return [
        *await _tables(conn, named),
        *await _views(conn, named),
        *await _indexes_and_statistics(conn, named),
        *await _triggers(conn, named),
        *await _sequences(conn, named),
    ]


def _options(rel: asyncpg.Record) -> str:
    return f" WITH ({', '.join(rel['reloptions'])})" if rel["reloptions"] else ""


async def _tables(conn: asyncpg.Connection, named: Mapping[int, asyncpg.Record]) -> list[Item]:
    oids = [oid for oid, r in named.items() if r["relkind"] == "r"]
    columns = _grouped(
        await conn.fetch(
            """
        SELECT a.attrelid AS owner, quote_ident(a.attname) AS name,
               format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull, a.attidentity::text, a.attgenerated::text,
               pg_get_expr(d.adbin, d.adrelid) AS expr,
               CASE WHEN a.attcollation <> t.typcollation THEN l.oid::regcollation::text END AS collation,
               CASE WHEN a.attstattarget >= 0 THEN a.attstattarget END AS stattarget, a.attoptions
        FROM pg_attribute a
        JOIN pg_type t ON t.oid = a.atttypid
        LEFT JOIN pg_collation l ON l.oid = a.attcollation
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attrelid = ANY($1::oid[]) AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum""",
            oids,
        )
    )
    constraints = _grouped(
        await conn.fetch(
            "SELECT conrelid AS owner, quote_ident(conname) AS name, contype::text, pg_get_constraintdef(oid, true) AS def"
            " FROM pg_constraint WHERE conrelid = ANY($1::oid[]) AND contype <> 'n'",
            oids,
        )
    )
    items = []
    for oid in oids:
        rel = named[oid]
        name = rel["name"]
        lines = [_column(c) for c in columns.get(oid, [])]
        ranked = sorted(constraints.get(oid, []), key=lambda c: (_CONSTRAINT_RANK[c["contype"]], c["name"]))
        lines += [f"CONSTRAINT {c['name']} {c['def']}" for c in ranked]
        unlogged = "UNLOGGED " if rel["relpersistence"] == "u" else ""
        body = ",\n".join(f"    {line}" for line in lines)
        sql = f"CREATE {unlogged}TABLE {name} (\n{body}\n){_options(rel)};"
        settings = _column_settings(name, columns.get(oid, []))
        items.append(Item("table", (name, "0"), f"Table {name}", "\n".join([sql, *settings])))
    return items


async def _views(conn: asyncpg.Connection, named: Mapping[int, asyncpg.Record]) -> list[Item]:
    rows = await conn.fetch(
        "SELECT c.oid, pg_get_viewdef(c.oid, true) AS def FROM pg_class c WHERE c.oid = ANY($1::oid[])",
        [oid for oid, r in named.items() if r["relkind"] in ("v", "m")],
    )
    items = []
    for row in rows:
        rel = named[row["oid"]]
        what, title = (
            ("VIEW", "View") if rel["relkind"] == "v" else ("MATERIALIZED VIEW", "Materialized view")
        )
        sql = f"CREATE {what} {rel['name']}{_options(rel)} AS\n{row['def'].rstrip().rstrip(';')};"
        items.append(Item("view", (rel["name"], "0"), f"{title} {rel['name']}", sql))
    return items


async def _indexes_and_statistics(
    conn: asyncpg.Connection, named: Mapping[int, asyncpg.Record]
) -> list[Item]:
    """Each placed under its table (or materialized view); indexes made by a constraint are left to
    the constraint."""
    oids = list(named)
    indexes = await conn.fetch(
        """
        SELECT i.indrelid AS owner, i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
        FROM pg_index i
        WHERE i.indrelid = ANY($1::oid[])
          AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.conindid = i.indexrelid
                          AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x'))""",
        oids,
    )
    statistics = await conn.fetch(
        "SELECT s.stxrelid AS owner, quote_ident(n.nspname) || '.' || quote_ident(s.stxname) AS name,"
        " pg_get_statisticsobjdef(s.oid) AS def"
        " FROM pg_statistic_ext s JOIN pg_namespace n ON n.oid = s.stxnamespace WHERE s.stxrelid = ANY($1::oid[])",
        oids,
    )
    items = []
    for kind, order, rows in (("Index", "1", indexes), ("Statistics", "2", statistics)):
        for row in rows:
            owner = named[row["owner"]]
            section = "table" if owner["relkind"] == "r" else "view"
            title = f"{kind} {row['name']}"
            items.append(Item(section, (owner["name"], order, row["name"]), title, row["def"] + ";"))
    return items


async def _triggers(conn: asyncpg.Connection, named: Mapping[int, asyncpg.Record]) -> list[Item]:
    rows = await conn.fetch(
        "SELECT tgrelid AS owner, quote_ident(tgname) AS name, pg_get_triggerdef(oid, true) AS def, tgenabled::text"
        " FROM pg_trigger WHERE tgrelid = ANY($1::oid[]) AND NOT tgisinternal",
        list(named),
    )
    items = []
    for row in rows:
        owner = named[row["owner"]]["name"]
        sql = row["def"] + ";"
        state = {"D": "DISABLE", "R": "ENABLE REPLICA", "A": "ENABLE ALWAYS"}.get(row["tgenabled"])
        if state:
            sql += f"\nALTER TABLE {owner} {state} TRIGGER {row['name']};"
        items.append(Item("trigger", (owner, row["name"]), f"Trigger {row['name']} on {owner}", sql))
    return items


async def _sequences(conn: asyncpg.Connection, named: Mapping[int, asyncpg.Record]) -> list[Item]:
    rows = await conn.fetch(
        """
        SELECT s.seqrelid AS oid, format_type(s.seqtypid, NULL) AS type, s.seqstart, s.seqincrement,
               s.seqmin, s.seqmax, s.seqcache, s.seqcycle, d.deptype::text,
               d.refobjid::regclass::text || '.' || quote_ident(a.attname) AS column
        FROM pg_sequence s
        LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid
             AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
        LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
        WHERE s.seqrelid = ANY($1::oid[])""",
        [oid for oid, r in named.items() if r["relkind"] == "S"],
    )
    items = []
    for seq in rows:
        if seq["deptype"] == "i":
            continue  # an identity column's own sequence: its column says GENERATED ... AS IDENTITY
        name = named[seq["oid"]]["name"]
        cycle = " CYCLE" if seq["seqcycle"] else ""
        owned = f"\n    OWNED BY {seq['column']}" if seq["column"] else ""
        sql = (
            f"CREATE SEQUENCE {name} AS {seq['type']}\n    START WITH {seq['seqstart']} INCREMENT BY"
            f" {seq['seqincrement']} MINVALUE {seq['seqmin']} MAXVALUE {seq['seqmax']} CACHE {seq['seqcache']}"
            f"{cycle}{owned};"
        )
        items.append(Item("sequence", (name,), f"Sequence {name}", sql))
    return items


def _column(c: asyncpg.Record) -> str:
    parts = [c["name"], c["type"]]
    if c["collation"]:
        parts.append(f"COLLATE {c['collation']}")
    if c["attidentity"]:
        parts.append(f"GENERATED {'ALWAYS' if c['attidentity'] == 'a' else 'BY DEFAULT'} AS IDENTITY")
    elif c["attgenerated"]:
        parts.append(f"GENERATED ALWAYS AS ({c['expr']}) STORED")
    elif c["expr"] is not None:
        parts.append(f"DEFAULT {c['expr']}")
    if c["attnotnull"]:
        parts.append("NOT NULL")
    return " ".join(parts)


def _column_settings(table: str, columns: Iterable[asyncpg.Record]) -> list[str]:
    out = []
    for c in columns:
        if c["stattarget"] is not None:
            out.append(f"ALTER TABLE {table} ALTER COLUMN {c['name']} SET STATISTICS {c['stattarget']};")
        if c["attoptions"]:
            out.append(f"ALTER TABLE {table} ALTER COLUMN {c['name']} SET ({', '.join(c['attoptions'])});")
    return out


async def _functions(conn: asyncpg.Connection) -> list[Item]:
    rows = await conn.fetch(f"""
        SELECT quote_ident(n.nspname) || '.' || quote_ident(p.proname) AS name,
               pg_get_function_identity_arguments(p.oid) AS args, pg_get_functiondef(p.oid) AS def, p.prokind::text
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE {_USER_NSP} AND p.prokind IN ('f', 'p', 'w') AND {_not_extension_member("pg_proc", "p.oid")}""")
    return [
        Item(
            "function",
            (r["name"], r["args"]),
            f"{'Procedure' if r['prokind'] == 'p' else 'Function'} {r['name']}({r['args']})",
            r["def"].rstrip() + ";",
        )
        for r in rows
    ]


# pg_identify_object's type -> the word COMMENT ON takes before its identity.
_COMMENT_TARGET = {
    "schema": "SCHEMA",
    "table": "TABLE",
    "table column": "COLUMN",
    "view": "VIEW",
    "view column": "COLUMN",
    "materialized view": "MATERIALIZED VIEW",
    "materialized view column": "COLUMN",
    "index": "INDEX",
    "sequence": "SEQUENCE",
    "function": "FUNCTION",
    "procedure": "PROCEDURE",
    "trigger": "TRIGGER",
    "table constraint": "CONSTRAINT",
    "type": "TYPE",
    "statistics object": "STATISTICS",
}


async def _comments(conn: asyncpg.Connection) -> list[Item]:
    """Comments on the objects of the application's schemas (a trigger's or a constraint's schema
    is its table's; pg_identify_object names no schema for a trigger)."""
    rows = await conn.fetch(f"""
        SELECT o.type, o.identity, quote_literal(d.description) AS text
        FROM pg_description d
        CROSS JOIN LATERAL pg_identify_object(d.classoid, d.objoid, d.objsubid) o
        JOIN pg_namespace n ON n.oid = CASE d.classoid
            WHEN 'pg_namespace'::regclass THEN d.objoid
            WHEN 'pg_class'::regclass THEN (SELECT relnamespace FROM pg_class WHERE oid = d.objoid)
            WHEN 'pg_proc'::regclass THEN (SELECT pronamespace FROM pg_proc WHERE oid = d.objoid)
            WHEN 'pg_type'::regclass THEN (SELECT typnamespace FROM pg_type WHERE oid = d.objoid)
            WHEN 'pg_constraint'::regclass THEN (SELECT connamespace FROM pg_constraint WHERE oid = d.objoid)
            WHEN 'pg_statistic_ext'::regclass THEN (SELECT stxnamespace FROM pg_statistic_ext WHERE oid = d.objoid)
            WHEN 'pg_trigger'::regclass THEN (SELECT c.relnamespace FROM pg_trigger t
                                              JOIN pg_class c ON c.oid = t.tgrelid WHERE t.oid = d.objoid)
        END
        WHERE {_USER_NSP}
          AND NOT (d.classoid = 'pg_namespace'::regclass AND n.nspname = 'public')  -- its stock comment
          AND NOT EXISTS (SELECT FROM pg_depend e WHERE e.classid = d.classoid AND e.objid = d.objoid
                          AND e.deptype = 'e')""")
    items = []
    for r in rows:
        target = _COMMENT_TARGET.get(r["type"])
        if target is None:
            raise UnsupportedObject(
                f"devkit/schema.py cannot print the comment on {r['type']} {r['identity']}"
            )
        sql = f"COMMENT ON {target} {r['identity']} IS {r['text']};"
        items.append(
            Item("comment", (r["type"], r["identity"]), f"Comment on {r['type']} {r['identity']}", sql)
        )
    return items


def _grouped(rows: Iterable[asyncpg.Record]) -> dict[int, list[asyncpg.Record]]:
    out: dict[int, list[asyncpg.Record]] = {}
    for row in rows:
        out.setdefault(row["owner"], []).append(row)
    return out


def difference(expected: str, actual: str, limit: int = 80) -> str:
    """The first `limit` lines of a unified diff from the file on disk to what the migrations make."""
    diff = list(
        difflib.unified_diff(
            expected.splitlines(),
            actual.splitlines(),
            "shared/db/schema.sql",
            "the migrations",
            lineterm="",
            n=2,
        )
    )
    more = [f"... {len(diff) - limit} more lines of difference"] if len(diff) > limit else []
    return "\n".join(diff[:limit] + more)


async def _build_on(server: PgServer) -> str:
    name = f"qf_schema_{uuid.uuid4().hex[:12]}"
    url = await server.create_database(name)
    try:
        return await build(url)
    finally:
        await server.drop_database(name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.schema", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    parser.add_argument(
        "--server", metavar="DSN", help="an existing server to use (a superuser or CREATEDB role)"
    )
    parser.add_argument("--output", type=Path, default=SCHEMA_FILE, help="the file (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.server:
        text = asyncio.run(_build_on(PgServer(args.server)))
    else:
        with throwaway_cluster("qf-schema-pg-") as server:
            text = asyncio.run(_build_on(server))
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
    shown = (
        args.output.resolve().relative_to(REPO) if args.output.resolve().is_relative_to(REPO) else args.output
    )
    if args.check:
        if current == text:
            return 0
        print(difference(current, text), file=sys.stderr)
        print(f"{shown} is not what the migrations make: run `make schema`", file=sys.stderr)
        return 1
    if current != text:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {shown}")
    else:
        print(f"{shown} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
