"""QueueFlow benchmark harness: `python -m bench` (or `make bench`); see docs/benchmarks.md.

Layout: `infra` starts and stops PostgreSQL and server processes and reads CPU/memory probes;
`client` is the HTTP side (enqueue, the remote worker loop); `report` summarises runs and prints
the table; `scenarios/` holds one module per scenario (W1a/W1b, W2, E, M, L).
"""
