"""shared/db/schema.sql is the schema the migrations make, as procrastinate checks its schema.sql:
replay the migrations into an empty database and compare (devkit/schema.py, `make schema`)."""

from __future__ import annotations

import re
import uuid

import asyncpg
import pytest

from devkit.schema import SCHEMA_FILE, UnsupportedObject, build, difference, read_schema


async def test_the_schema_file_is_what_the_migrations_make(empty_database):
    on_disk = SCHEMA_FILE.read_text(encoding="utf-8")
    conn = await asyncpg.connect(empty_database)
    try:
        major = await conn.fetchval("SELECT current_setting('server_version_num')::int / 10000")
    finally:
        await conn.close()
    printed_by = re.search(r"from PostgreSQL (\d+)'s catalogs", on_disk)
    if printed_by and int(printed_by.group(1)) != major:
        pytest.skip(
            f"the file was printed by PostgreSQL {printed_by.group(1)}'s catalogs, this server is {major}"
        )
    made = await build(empty_database)
    if made != on_disk:
        pytest.fail(
            "shared/db/schema.sql is not what the migrations make: run `make schema` and commit the file\n"
            + difference(on_disk, made),
            pytrace=False,
        )


async def test_a_new_index_and_an_edited_function_change_what_the_file_shows(db):
    before = {item.key: item.sql for item in await read_schema(db)}
    await db.execute(
        "CREATE INDEX jobs_progress_idx ON queueflow.jobs (worker_id) WHERE progress IS NOT NULL"
    )
    # The way migrations 28 to 32 edit a function: one exact text replacement.
    await db.execute("""
        SELECT queueflow.edit_function('queueflow.limit_room(queueflow.limit_state, integer)'::regprocedure,
                                       ARRAY[ARRAY['RETURN LEAST(', 'RETURN LEAST(0, ']], 'test')""")
    after = {item.key: item.sql for item in await read_schema(db)}

    changed = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    room = ("function", "Function queueflow.limit_room(s queueflow.limit_state, big integer)")
    index = ("table", "Index queueflow.jobs_progress_idx")
    assert changed == {room, index}
    assert "RETURN LEAST(0, " in after[room]
    assert after[index].startswith("CREATE INDEX jobs_progress_idx ON queueflow.jobs USING btree (worker_id)")


async def test_views_types_statistics_extensions_and_comments_show_in_the_file(db):
    before = {item.key for item in await read_schema(db)}
    await db.execute("""
        CREATE TYPE queueflow.mood AS ENUM ('calm', 'busy');
        CREATE VIEW queueflow.waiting AS SELECT id FROM queueflow.jobs WHERE status = 'pending';
        CREATE STATISTICS queueflow.jobs_queue_tenant ON queue_name, tenant_id FROM queueflow.jobs;
        CREATE EXTENSION pg_trgm SCHEMA queueflow;
        COMMENT ON TRIGGER jobs_notify_inserted ON queueflow.jobs IS 'wakes the queue''s waiters';
        ALTER TABLE queueflow.jobs DISABLE TRIGGER jobs_step_finished""")
    after = {item.key: item.sql for item in await read_schema(db)}

    assert set(after) - before == {
        ("type", "Type queueflow.mood"),
        ("view", "View queueflow.waiting"),
        ("table", "Statistics queueflow.jobs_queue_tenant"),
        ("extension", "Extension pg_trgm"),  # and none of its functions, types or operators
        ("comment", "Comment on trigger jobs_notify_inserted on queueflow.jobs"),
    }
    assert after[("type", "Type queueflow.mood")] == "CREATE TYPE queueflow.mood AS ENUM ('calm', 'busy');"
    assert after[("trigger", "Trigger jobs_step_finished on queueflow.jobs")].endswith(
        "\nALTER TABLE queueflow.jobs DISABLE TRIGGER jobs_step_finished;"
    )
    # What the file prints is SQL the server takes back.
    await db.execute(after[("comment", "Comment on trigger jobs_notify_inserted on queueflow.jobs")])


async def test_owners_and_privileges_do_not_show_in_the_file(db):
    before = [item.sql for item in await read_schema(db)]
    role = f"qf_schema_owner_{uuid.uuid4().hex[:8]}"
    await db.execute(f"CREATE ROLE {role}")
    try:
        await db.execute(f"ALTER TABLE queueflow.jobs OWNER TO {role}")
        await db.execute(
            f"ALTER FUNCTION queueflow.limit_room(queueflow.limit_state, integer) OWNER TO {role}"
        )
        await db.execute(f"GRANT SELECT ON queueflow.dead_letters TO {role}")
        await db.execute(f"GRANT USAGE ON SCHEMA queueflow TO {role}")
        assert [item.sql for item in await read_schema(db)] == before
    finally:
        await db.execute(f"REASSIGN OWNED BY {role} TO CURRENT_USER; DROP OWNED BY {role}; DROP ROLE {role}")


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("CREATE TYPE queueflow.span AS RANGE (subtype = integer)", "type queueflow.span"),
        (
            "CREATE POLICY own_rows ON queueflow.jobs USING (tenant_id IS NULL)",
            "policy own_rows on queueflow.jobs",
        ),
        (
            "CREATE RULE keep AS ON DELETE TO queueflow.events DO INSTEAD NOTHING",
            "rule keep on queueflow.events",
        ),
    ],
)
async def test_an_object_the_file_cannot_show_is_refused_by_name(db, statement, named):
    await db.execute(statement)
    with pytest.raises(UnsupportedObject, match=re.escape(named)):
        await read_schema(db)
