"""Helpers only the test suite needs: the in-process API fixture and polling. PostgreSQL and
real QueueFlow processes come from devkit, which the benchmark shares."""
