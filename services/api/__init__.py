"""The protocol API: tenant REST routes, the remote worker protocol, SSE events, /openapi.json."""
