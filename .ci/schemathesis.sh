#!/usr/bin/env bash
# Fuzz the admin API and the pull consumer API against their OpenAPI documents
# with schemathesis (PyPI): no 5xx,
# no response that violates the document, no schema-valid request refused.
# Usage: .ci/schemathesis.sh path/to/hookgate
set -euo pipefail
BIN="$(realpath "$1")"
WORK="$(mktemp -d)"
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT

if [ -n "${SCHEMATHESIS_VENV:-}" ]; then
    ln -s "$SCHEMATHESIS_VENV" "$WORK/venv"
fi
if [ ! -x "$WORK/venv/bin/schemathesis" ]; then
    python3 -m venv "$WORK/venv"
    "$WORK/venv/bin/pip" install -q "schemathesis==4.32.5"
fi

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
INGEST=$(port); ADMIN=$(port)
cat > "$WORK/hookgate.toml" <<TOML
[server]
listen = "127.0.0.1:$INGEST"
[admin]
listen = "127.0.0.1:$ADMIN"
# The run checks every operation without and with a wrong token from one client,
# thousands of times: the per-client lockout would answer the rest 429.
failed_auth_allowance = 1000000
[store]
kind = "embedded"
path = "$WORK/data"
[forwarder]
poll_interval = "100ms"
[[sources]]
name = "demo"
provider = "hmac"
secret = "demo-secret"
destination = "http://127.0.0.1:9/demo"
[sources.retry]
max_attempts = 1
# A source whose secret comes in a handshake, for the handshake operations.
[[sources]]
name = "asana"
provider = "asana"
destination = "http://127.0.0.1:9/asana"
# A pull route, for the consumer API.
[[sources]]
name = "pulled"
provider = "hmac"
secret = "pulled-secret"
destination = "pull"
pull_token_env = "SCHEMATHESIS_PULL_TOKEN"
TOML
SCHEMATHESIS_PULL_TOKEN=schemathesis-pull-token-0123 HOOKGATE_ADMIN_TOKEN=schemathesis-token "$BIN" serve --config "$WORK/hookgate.toml" > "$WORK/log" 2>&1 &
PID=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$ADMIN/readyz" >/dev/null && break; sleep 0.2; done

# Some entries (they go dead: the destination refuses connections) for the API to show.
for i in 1 2 3 4 5; do
    eval "$("$BIN" sign --provider hmac --secret demo-secret --body "{\"n\":$i}" \
        --url "http://127.0.0.1:$INGEST/ingest/demo" | tail -1)" >/dev/null
done
sleep 1

"$WORK/venv/bin/schemathesis" run "http://127.0.0.1:$ADMIN/admin/openapi.json" \
    -H "Authorization: Bearer schemathesis-token" \
    --checks all --max-examples 100 --wait-for-schema 10
# The pull API on its one pull route (other routes are 401 before anything).
cat > "$WORK/pull.toml" <<TOML
[parameters]
"path.source" = "pulled"
"path.route" = "default"
TOML
# The document as served, but long polls of at most 1 s: a run of hundreds of
# requests on an empty route would otherwise wait minutes.
curl -sf "http://127.0.0.1:$INGEST/pull/openapi.json" | python3 -c '
import json, sys
d = json.load(sys.stdin)
d["components"]["schemas"]["PullRequest"]["properties"]["wait"]["pattern"] = "^[01]s$"
json.dump(d, sys.stdout)' > "$WORK/pull-openapi.json"
"$WORK/venv/bin/schemathesis" --config-file "$WORK/pull.toml" run "$WORK/pull-openapi.json" \
    --url "http://127.0.0.1:$INGEST" \
    -H "Authorization: Bearer schemathesis-pull-token-0123" \
    --checks all --max-examples 100 --wait-for-schema 10
if grep -q "panicked" "$WORK/log"; then
    echo "the gateway logged a panic during the schemathesis run:" >&2
    grep -A3 "panicked" "$WORK/log" >&2
    exit 1
fi
