"""QueueFlow benchmark harness: `python -m bench` (or `make bench`); see docs/benchmarks.md.

Layout: devkit (shared with the tests) runs the PostgreSQL cluster and every child process;
`harness` adds the harness's rules to them (the cluster of an invocation, a database per run,
Ctrl-C handling, the 5 s stop, client processes); `probes` reads CPU, memory, socket and
Prometheus figures; `client` is the HTTP side (enqueue, the remote worker loop) and
`remote_worker` runs those loops in a process of its own; `report` summarises runs and prints the
table; `scenarios/` holds one module per scenario (W1a/W1b, W2, E, M, L); `compare` with `peers/`
puts QueueFlow beside graphile-worker, pg-boss and PgQueuer (`python -m bench.compare`).
"""
