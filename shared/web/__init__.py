"""HTTP plumbing every service shares: decoding bodies with msgspec and answering JSON, mapping
domain errors to the contract's error body (one middleware), credentials, and the one patch that
gives aiohttp's own parse errors that body too. Knows the wire and domain types, never the db."""
