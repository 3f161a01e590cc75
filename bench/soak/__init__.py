"""The soak (`make soak`, `python -m bench.soak`): mixed load for a long while against real server
processes, with a SIGKILL of one service every couple of minutes, sampling every process's RSS and
PostgreSQL connections, then checking that no job was lost and that every duplicate execution is
explained by a kill. docs/operations.md, "Soak", has a full run's figures."""
