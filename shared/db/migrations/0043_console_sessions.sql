-- QueueFlow schema, version 43: the console's single sign-on sessions (issue 40; docs/access.md).
--
-- * console_sessions: one row per operator signed in to the console through the OpenID provider
--   (--oidc-issuer). The browser holds only a random session token in an HttpOnly cookie; the row
--   is keyed by that token's SHA-256, so the table never holds a usable cookie. It keeps the
--   provider's tokens (the access token that each console call is authorized with, the refresh
--   token that renews it, the ID token that RP-initiated logout names), the CSRF token that every
--   mutating call must echo, who signed in (for display), when the access token is to be renewed
--   (`renew_at`, ahead of its expiry), and when the session ends for good.
--   Every api replica reads the same rows, so any of them serves any session; a renewal locks its
--   row, so two replicas never spend one refresh token twice.
CREATE TABLE queueflow.console_sessions (
    id_digest bytea PRIMARY KEY,
    csrf_token text NOT NULL,
    subject text NOT NULL,
    name text NOT NULL,
    tenant_id text NOT NULL,
    role text NOT NULL,
    access_token text NOT NULL,
    renew_at timestamptz NOT NULL,
    refresh_token text,
    id_token text,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE INDEX console_sessions_expiry ON queueflow.console_sessions (expires_at);
