#!/usr/bin/env bash
# A stand-in for ./resize-image: works for the payload's "work_secs", then succeeds unless "ok" is false.
payload=$1
sleep "$(echo "$payload" | jq -r '.work_secs // 0')"
[ "$(echo "$payload" | jq -r 'if .ok == false then "no" else "yes" end')" = "yes" ]
