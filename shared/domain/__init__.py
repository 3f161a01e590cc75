"""The domain model: jobs, workflows and cron schedules, their statuses and rules, and the domain
errors. Pure: nothing here does I/O or knows HTTP, asyncpg or the wire types (import-linter holds
that; see docs/architecture.md)."""
