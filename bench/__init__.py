"""QueueFlow benchmark harness: `python -m bench` (or `make bench`); see docs/benchmarks.md.

Layout: devkit (shared with the tests) runs the PostgreSQL cluster and the server processes;
`harness` adds the harness's rules to them (a database per run, Ctrl-C handling, the 5 s stop);
`probes` reads CPU, memory, socket and Prometheus figures; `client` is the HTTP side (enqueue,
the remote worker loop); `report` summarises runs and prints the table; `scenarios/` holds one
module per scenario (W1a/W1b, W2, E, M, L).
"""
