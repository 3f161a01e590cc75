"""Job ids (shared/domain/jobs.py, new_job_ids): UUIDs of version 7, built without uuid.UUID's
argument checks, so they must behave exactly as the ids uuid.UUID itself makes."""

from __future__ import annotations

import time
import uuid

import msgspec

from shared.domain.jobs import new_job_ids


def test_job_ids_are_version_7_uuids_that_behave_as_any_uuid() -> None:
    before = time.time_ns() // 1_000_000
    ids = new_job_ids(1000)
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == 1000
    for made in ids:
        same = uuid.UUID(str(made))
        assert type(made) is uuid.UUID
        assert (made.version, made.variant) == (7, uuid.RFC_4122)
        assert made == same and hash(made) == hash(same) and not made < same
        assert made.bytes == same.bytes and made.hex == same.hex and repr(made) == repr(same)
        assert before <= made.int >> 80 <= after  # the millisecond it was made, in its first 48 bits
    assert msgspec.json.decode(msgspec.json.encode(ids), type=list[uuid.UUID]) == ids


def test_ids_made_together_differ_in_their_random_bits() -> None:
    first, second = new_job_ids(2)
    random_bits = (((1 << 12) - 1) << 64) | ((1 << 62) - 1)  # rand_a and rand_b of RFC 9562
    assert first.int & random_bits != second.int & random_bits
