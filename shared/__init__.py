"""Code every QueueFlow service shares: settings, domain model, wire types, database, auth, logging, metrics, CLI."""

__version__ = "0.6.0"
