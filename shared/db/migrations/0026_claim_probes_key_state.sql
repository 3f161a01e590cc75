-- QueueFlow schema, version 26: a limited claim reads the state rows of its own keys only, however
-- many keys are known.
--
-- queueflow.claim_limited's plans are generic, made at a session's first limited claim. Made while
-- limit_state held a thousand rows or so (any young database), the window's join to the state of
-- its keys (walk_room) was a hash join over a sequential scan of the whole table. The server's
-- connections keep that plan for good, and limit_state keeps a row for every key ever named (a
-- customer's key, a tenant's): a claim of 80 took 5.7 ms with 1,000 keys known, 6.6 ms with
-- 11,000 and 9.3 ms with 101,000 (ADR 0022). The function
-- now plans with sequential scans off, as migration 24's release functions and limit_room do: each
-- join to limit_state probes its primary key for the keys at hand (6.0-6.4 ms at every size).
ALTER FUNCTION queueflow.claim_limited(text, integer, integer, integer, bigint, uuid, text, text)
    SET enable_seqscan = off;
