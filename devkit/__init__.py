"""Tooling for developing, testing and benchmarking QueueFlow; not part of the server.

`make run`, the test suite and the benchmark harness start PostgreSQL and QueueFlow processes in
the same way, so that code lives here once: `pg` (an embedded PostgreSQL cluster and the admin
statements on its databases), `procs` (real `queueflow serve` processes and the other child
processes the tests and the benchmark start), `ports` (free TCP ports), `devrun` (what `make
run` runs) and `schema` (`make schema`: shared/db/schema.sql from the migrations). The runtime wheel ships only `services` and `shared`, and neither imports this
package; the editable install used by `make` puts the repository root on sys.path, which is how
tests, bench and `make run` find it.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
