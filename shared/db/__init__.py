"""The db layer: the only code that talks to PostgreSQL. It holds every SQL statement (named
blocks in queries/*.sql, loaded by queries.py, plus the listing builder and the migrator), calls
asyncpg, answers with domain types and raises domain errors. Each repository function owns one
operation; functions that take a connection let the caller own the transaction."""

from shared.db.pool import Connection, Executor, Pool, transaction

__all__ = ["Connection", "Executor", "Pool", "transaction"]
