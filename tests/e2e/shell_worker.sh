#!/usr/bin/env bash
# The worker loop of the remote-workers page ("Writing a worker from scratch"), unchanged but for
# variables: the base URL, token, queue and intervals come from the environment (the test
# shortens them), the handler is $HANDLER, and each heartbeat's answer is appended to $HB_LOG.
BASE=${BASE:-http://localhost:8000}
AUTH="Authorization: Bearer ${WORKER_TOKEN:?}"
QUEUE=${QUEUE:-images}
LEASE_SECS=${LEASE_SECS:-60}
WAIT_SECS=${WAIT_SECS:-20}
HB_EVERY=${HB_EVERY:-30}
HANDLER=${HANDLER:-./resize-image}
HB_LOG=${HB_LOG:-/dev/null}

while true; do
  leased=$(curl -s -X POST "$BASE/api/v1/queues/$QUEUE/lease" -H "$AUTH" -H 'Content-Type: application/json' \
    -d "{\"max_jobs\":1,\"lease_secs\":$LEASE_SECS,\"wait_secs\":$WAIT_SECS}")
  id=$(echo "$leased"    | jq -r '.jobs[0].job.id // empty')
  token=$(echo "$leased" | jq -r '.jobs[0].lease_token // empty')
  [ -z "$id" ] && continue                      # empty long-poll; lease again

  # Heartbeat in the background every $HB_EVERY seconds while the handler runs.
  ( while sleep "$HB_EVERY"; do
      status=$(curl -s -X POST "$BASE/api/v1/jobs/$id/heartbeat" -H "$AUTH" -H 'Content-Type: application/json' \
        -d "{\"lease_token\":\"$token\",\"extend_secs\":$LEASE_SECS}" | jq -r .status)
      echo "$id $status" >> "$HB_LOG"
      [ "$status" != "running" ] && exit 0      # server owns the outcome now
    done ) & hb=$!

  if "$HANDLER" "$(echo "$leased" | jq -c '.jobs[0].job.payload')"; then
    curl -s -X POST "$BASE/api/v1/jobs/$id/complete" -H "$AUTH" -H 'Content-Type: application/json' \
      -d "{\"lease_token\":\"$token\",\"result\":{\"ok\":true}}"
  else
    curl -s -X POST "$BASE/api/v1/jobs/$id/fail" -H "$AUTH" -H 'Content-Type: application/json' \
      -d "{\"lease_token\":\"$token\",\"error\":\"resize failed\",\"retryable\":true}"
  fi
  kill $hb 2>/dev/null
done
