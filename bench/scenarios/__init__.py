"""The scenarios, one module each, in the order the harness runs them."""

from __future__ import annotations

from bench.context import Scenario
from bench.scenarios import (
    e_enqueue,
    f_fairness,
    h_history,
    k_limits,
    l_pgbench,
    m_idle,
    p_push,
    t_time,
    v_visibility,
    w1_drain,
    w2_latency,
    w3_workflows,
)

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        w1_drain.REMOTE,
        w1_drain.IN_PROCESS,
        p_push.SCENARIO,
        w2_latency.SCENARIO,
        w3_workflows.SCENARIO,
        e_enqueue.SCENARIO,
        m_idle.SCENARIO,
        f_fairness.SCENARIO,
        l_pgbench.SCENARIO,
        h_history.SCENARIO,
        k_limits.SCENARIO,
        t_time.SCENARIO,
        v_visibility.SCENARIO,
    )
}
# Names that select several scenarios.
# H writes ten million rows (about five minutes): it runs when named, not with "all".
ALIASES: dict[str, tuple[str, ...]] = {"all": tuple(n for n in SCENARIOS if n != "H"), "W1": ("W1a", "W1b")}
