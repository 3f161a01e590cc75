"""Helpers shared by the test suite: PostgreSQL databases, real QueueFlow processes, polling."""
