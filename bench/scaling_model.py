"""`python -m bench.scaling_model`: the throughput QueueFlow reaches when tenants are spread over
several PostgreSQL clusters (or Citus worker nodes), given one cluster's measured capacity.

The model (docs/scaling.md explains it and sources its inputs):

- One cluster drains at most `capacity` jobs/s (measured; the default is the figure docs/scaling.md
  sources). Work is not shared between clusters: a tenant's jobs live, are claimed and complete on
  its own cluster.
- `tenants` tenants offer load in Zipf proportions (share of tenant i ~ 1 / i**skew; skew 0 is
  uniform). The fleet as a whole is limited by its hottest cluster: total = capacity / (largest
  share any one cluster carries). One tenant never exceeds one cluster, so the heaviest tenant's
  share alone caps the total at capacity / its share.
- Placement: `hash` puts a tenant on hash(tenant) mod clusters (what a router or Citus's hash
  distribution does with no tuning; averaged over `trials` random hash functions, the worst trial
  beside it); `balanced` places tenants heaviest first on the least loaded cluster (a routing
  table an operator maintains, moving tenants as loads change).
- Citus adds a coordinator that plans every statement (unless the application connects to the
  worker nodes directly): `coordinator` statements/s, times the statements a job costs
  (`statements_per_job`), is one more ceiling. It is an input, not a measurement.

Prints a Markdown table per skew: clusters, the total for each placement, and its fraction of
clusters x capacity.
"""

from __future__ import annotations

import argparse
import random
import sys


def shares(tenants: int, skew: float) -> list[float]:
    weights = [1 / (i**skew) for i in range(1, tenants + 1)]
    total = sum(weights)
    return [w / total for w in weights]


def hash_placement(load: list[float], clusters: int, rng: random.Random) -> float:
    """The largest cluster share when each tenant lands on a uniformly random cluster."""
    per = [0.0] * clusters
    for share in load:
        per[rng.randrange(clusters)] += share
    return max(per)


def balanced_placement(load: list[float], clusters: int) -> float:
    """The largest cluster share with tenants placed heaviest first on the least loaded cluster."""
    per = [0.0] * clusters
    for share in sorted(load, reverse=True):
        i = per.index(min(per))
        per[i] += share
    return max(per)


def table(args: argparse.Namespace, skew: float) -> list[str]:
    load = shares(args.tenants, skew)
    rng = random.Random(args.seed)
    rows = [
        (
            f"skew {skew:g} ({args.tenants} tenants; heaviest tenant {100 * load[0]:.1f}% of the load; "
            f"one cluster {args.capacity:,.0f} jobs/s)"
        ),
        "",
        "| clusters | hash: mean total | hash: worst of trials | balanced total | balanced / (clusters x one) |"
        + (" Citus, coordinator-bound |" if args.coordinator else ""),
        "| ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if args.coordinator else ""),
    ]
    for k in args.clusters:
        worst = [hash_placement(load, k, rng) for _ in range(args.trials)]
        mean_total = sum(args.capacity / w for w in worst) / len(worst)
        worst_total = args.capacity / max(worst)
        balanced_total = args.capacity / balanced_placement(load, k)
        line = (
            f"| {k} | {mean_total:,.0f} | {worst_total:,.0f} | {balanced_total:,.0f} | "
            f"{balanced_total / (k * args.capacity):.2f} |"
        )
        if args.coordinator:
            line += f" {min(balanced_total, args.coordinator / args.statements_per_job):,.0f} |"
        rows.append(line)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scaling_model", description=__doc__)
    p.add_argument("--capacity", type=float, default=8576, help="one cluster's jobs/s (default: measured)")
    p.add_argument("--tenants", type=int, default=1000)
    p.add_argument("--skews", default="0,0.8,1.2", help="Zipf exponents, comma-separated")
    p.add_argument("--clusters", default="1,2,4,8,16", help="cluster counts, comma-separated")
    p.add_argument("--trials", type=int, default=200, help="random hash functions per cell")
    p.add_argument("--coordinator", type=float, default=0.0, help="Citus: coordinator statements/s (0: none)")
    p.add_argument("--statements-per-job", type=float, default=0.12, help="Citus: statements one job costs")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    args.clusters = [int(x) for x in args.clusters.split(",")]
    for skew in (float(x) for x in args.skews.split(",")):
        print("\n".join(table(args, skew)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
