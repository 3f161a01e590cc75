-- QueueFlow schema, version 10: lease tokens derived from the claim's key.
--
-- A claim passes a random key, and each job's lease token is derived from that key and the job's
-- id (SHA-256, shaped as a version-4 UUID; the key's randomness keeps the token as unguessable as
-- gen_random_uuid()). Should the claim's answer be lost with its connection after the commit (a
-- database crash or restart, a cut network), the claimer still knows the key and gives the jobs
-- back as soon as the database answers, instead of leaving them leased to no one until their
-- leases expire and a retry is spent.
CREATE FUNCTION queueflow.v4_from_hex(h text) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN overlay(overlay(substr(h, 1, 32) PLACING '4' FROM 13)
                   PLACING translate(substr(h, 17, 1), '0123456789abcdef', '89ab89ab89ab89ab') FROM 17)::uuid;

CREATE FUNCTION queueflow.lease_token(claim_key uuid, job_id uuid) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN queueflow.v4_from_hex(encode(sha256(convert_to(claim_key::text || job_id::text, 'UTF8')), 'hex'));
