"""The lease janitor: reclaims expired leases, wakes queues whose delayed jobs fall due, prunes."""
