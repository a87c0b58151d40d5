#!/usr/bin/env bash
# Load test of the collector (and the aggregator, if it starts) with locust, on 127.0.0.1 only.
#
#   loadtest/run.sh                                  # 30 s, 20 users, one locust process per core
#   RUN_TIME=10s USERS=4 loadtest/run.sh
#
# It starts what it needs -- a real Redis (ldp_server.redis_server, via loadtest/support.py),
# the collector (uvicorn, free loopback port), the aggregator if its app imports -- registers
# the load-test metrics, runs locust headless (master + one worker per core) for RUN_TIME,
# writes locust's CSV files and summary.md into OUT_DIR, and checks that the collector's
# counts in Redis equal what locust saw accepted.  Exit status: 0 only if there were no
# failed requests and every count matches.  A trap stops exactly the pids this script
# started (SIGTERM, then SIGKILL).
#
# Settings (environment): RUN_TIME (30s), USERS (20), SPAWN_RATE (10), PROCESSES (nproc),
# COLLECTOR_WORKERS (1; above 1 via benchmarks/uvicorn_tcp.py unless PLAIN_UVICORN=1),
# LDP_LT_DEVICES (4 devices x 5 metrics per batch),
# LDP_LT_THINK_MIN / LDP_LT_THINK_MAX (0.5 / 2.0 s), OUT_DIR (loadtest/out/<UTC time>),
# PYTHON (.venv/bin/python), NO_AGGREGATOR=1 to skip the aggregator and the analyst user,
# LDP_RATE_LIMIT_PER_SECOND (default 0 = off: the one ingest key here stands for a whole fleet).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
RUN_TIME="${RUN_TIME:-30s}"
USERS="${USERS:-20}"
SPAWN_RATE="${SPAWN_RATE:-10}"
PROCESSES="${PROCESSES:-$(nproc)}"
COLLECTOR_WORKERS="${COLLECTOR_WORKERS:-1}"
OUT_DIR="${OUT_DIR:-$ROOT/loadtest/out/$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"

ADMIN_KEY="lt-admin-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
INGEST_KEY="lt-ingest-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
ANALYST_KEY="lt-analyst-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"

PIDS=()
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    local pid
    # Reverse order: locust, aggregator, collector, then Redis last.
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        pid="${PIDS[$i]}"
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            if kill -0 "$pid" 2>/dev/null; then
                kill -KILL "$pid" 2>/dev/null || true
            fi
            wait "$pid" 2>/dev/null || true
        fi
    done
    exit "$status"
}
trap cleanup EXIT INT TERM

free_port() { "$PY" -c 'from ldp_server.redis_server import free_port; print(free_port())'; }

cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# -- Redis (a real redis-server owned by a python holder that stops it on SIGTERM) --------
REDIS_PORT="$(free_port)"
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
"$PY" loadtest/support.py redis "$OUT_DIR/redis" "$REDIS_PORT" >"$OUT_DIR/redis-holder.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do
    grep -q "redis ready" "$OUT_DIR/redis-holder.log" 2>/dev/null && break
    sleep 0.1
done
grep -q "redis ready" "$OUT_DIR/redis-holder.log" || { echo "redis did not start" >&2; exit 1; }

# -- collector -------------------------------------------------------------------------------
COLLECTOR_PORT="$(free_port)"
COLLECTOR_URL="http://127.0.0.1:$COLLECTOR_PORT"
if [[ "$COLLECTOR_WORKERS" -gt 1 && "${PLAIN_UVICORN:-0}" != "1" ]]; then
    # `uvicorn --workers N` loses TCP_NODELAY (Kludex/uvicorn#3149); same supervisor, fixed socket.
    COLLECTOR_CMD=("$PY" benchmarks/uvicorn_tcp.py collector.app:create_app "$COLLECTOR_PORT"
                   "$COLLECTOR_WORKERS")
else
    COLLECTOR_CMD=("$PY" -m uvicorn --factory collector.app:create_app --host 127.0.0.1
                   --port "$COLLECTOR_PORT" --workers "$COLLECTOR_WORKERS" --no-access-log
                   --log-level warning)
fi
LDP_ENV=dev LDP_REDIS_URL="$REDIS_URL" LDP_ADMIN_KEYS="$ADMIN_KEY" LDP_INGEST_KEYS="$INGEST_KEY" \
LDP_ANALYST_KEYS="$ANALYST_KEY" LDP_LOG_LEVEL=WARNING \
LDP_TOKEN_KEY_FILE="$ROOT/tests/support/token_key.pem" \
LDP_RATE_LIMIT_PER_SECOND="${LDP_RATE_LIMIT_PER_SECOND:-0}" \
    "${COLLECTOR_CMD[@]}" >"$OUT_DIR/collector.log" 2>&1 &
PIDS+=($!)
"$PY" loadtest/support.py wait "$COLLECTOR_URL/readyz" 60 || { cat "$OUT_DIR/collector.log" >&2; exit 1; }

# -- aggregator (optional) -------------------------------------------------------------------
AGGREGATOR_URL=""
if [[ "${NO_AGGREGATOR:-0}" != "1" ]] && "$PY" -c "import aggregator.app" 2>/dev/null; then
    AGGREGATOR_PORT="$(free_port)"
    LDP_ENV=dev LDP_REDIS_URL="$REDIS_URL" LDP_ANALYST_KEYS="$ANALYST_KEY" \
        "$PY" -m uvicorn --factory aggregator.app:create_app --host 127.0.0.1 \
        --port "$AGGREGATOR_PORT" --no-access-log --log-level warning \
        >"$OUT_DIR/aggregator.log" 2>&1 &
    PIDS+=($!)
    if "$PY" loadtest/support.py wait "http://127.0.0.1:$AGGREGATOR_PORT/healthz" 60; then
        AGGREGATOR_URL="http://127.0.0.1:$AGGREGATOR_PORT"
    else
        echo "aggregator did not start; the analyst user is disabled" >&2
    fi
fi

# -- metrics ---------------------------------------------------------------------------------
"$PY" loadtest/support.py register "$COLLECTOR_URL" "$ADMIN_KEY" "$OUT_DIR/specs.json"

# -- locust: master + one worker per core, headless, bounded ---------------------------------
export LDP_LT_SPECS="$OUT_DIR/specs.json"
export LDP_LT_LOG_DIR="$OUT_DIR/accepted"
export LDP_INGEST_KEY="$INGEST_KEY"
export LDP_ANALYST_KEY="$ANALYST_KEY"
export LDP_AGGREGATOR_URL="$AGGREGATOR_URL"
if [[ -z "$AGGREGATOR_URL" ]]; then export LDP_LT_ANALYST_WEIGHT=0; fi
echo "locust: $USERS users, $PROCESSES worker process(es), $RUN_TIME against $COLLECTOR_URL" \
     "${AGGREGATOR_URL:+(analysts on $AGGREGATOR_URL)}"
set +e
"$PY" -m locust -f loadtest/locustfile.py --headless --host "$COLLECTOR_URL" \
    --users "$USERS" --spawn-rate "$SPAWN_RATE" --run-time "$RUN_TIME" \
    --processes "$PROCESSES" --stop-timeout 10 --csv "$OUT_DIR/locust" \
    --only-summary --loglevel WARNING --logfile "$OUT_DIR/locust.log" \
    >"$OUT_DIR/locust.out" 2>&1 &
LOCUST_PID=$!
PIDS+=("$LOCUST_PID")
wait "$LOCUST_PID"
LOCUST_STATUS=$?
set -e
tail -n 30 "$OUT_DIR/locust.out"

# -- check: failures, and the collector's counts against what locust saw accepted ------------
sleep 0.5
set +e
"$PY" loadtest/support.py check --redis-url "$REDIS_URL" --specs "$OUT_DIR/specs.json" \
    --log-dir "$OUT_DIR/accepted" --csv-prefix "$OUT_DIR/locust" --summary "$OUT_DIR/summary.md"
CHECK_STATUS=$?
set -e
echo "output: $OUT_DIR"
if [[ $LOCUST_STATUS -ne 0 || $CHECK_STATUS -ne 0 ]]; then
    echo "load test FAILED (locust exit $LOCUST_STATUS, check exit $CHECK_STATUS)" >&2
    exit 1
fi
echo "load test OK"
