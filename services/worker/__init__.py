"""In-process Python handlers: the runtime that leases and runs them, the registry, the built-ins."""
