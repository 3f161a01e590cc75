"""Functions that turn sequential scans off turn JIT compilation off too (migration 40).

`enable_seqscan = off` prices a sequential scan it cannot avoid at 10^10, far above
`jit_above_cost`, and with PostgreSQL's default `jit = on` such a statement was compiled with LLVM
on every call: the janitor's slot repair took 475 ms of a core for a 1 ms statement."""

from __future__ import annotations


async def test_every_function_that_forces_index_plans_also_turns_jit_off(db):
    rows = await db.fetch(
        """SELECT p.proname, p.proconfig FROM pg_proc p
           WHERE p.pronamespace = 'queueflow'::regnamespace AND p.proconfig IS NOT NULL"""
    )
    forcing = {r["proname"]: set(r["proconfig"]) for r in rows if "enable_seqscan=off" in r["proconfig"]}
    assert "repair_limit_state" in forcing and "claim_limited" in forcing  # the test sees them
    assert {name for name, config in forcing.items() if "jit=off" not in config} == set()
