#!/usr/bin/env bash
# A whole farm on one node for one batch: Redis (password, no persistence, in a temp folder), N CPU
# compile workers, one GPU measure worker per GPU (pinned with CUDA_VISIBLE_DEVICES), then
# `orchestrator submit` against it; everything it started is stopped at the end. The workers run only
# models under the submit's --out (default farm-out); the password never appears on a command line.
#
#   deploy/farm_on_one_node.sh [--compile-workers N] [--port P] [--logs DIR] -- MODEL.py... --out DIR [submit options]
#
# For a standing farm use the systemd units or the compose file (deploy/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
COMPILE_WORKERS=2
PORT=$((20000 + RANDOM % 20000))
LOGS=$(mktemp -d -t farm-logs-XXXX)
while [ $# -gt 0 ]; do
    case "$1" in
        --compile-workers) COMPILE_WORKERS="$2"; shift 2 ;;
        --port) PORT="$2"; shift 2 ;;
        --logs) LOGS="$2"; mkdir -p "$LOGS"; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
OUT=farm-out
ARGS=("$@")
for i in "${!ARGS[@]}"; do
    case "${ARGS[i]}" in
        --out) OUT="${ARGS[i+1]}" ;;
        --out=*) OUT="${ARGS[i]#--out=}" ;;
    esac
done
RUN=$(mktemp -d -t farm-redis-XXXX)
PASS=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
PIDS=()
stop() {  # the workers first (their warm shutdown still talks to Redis), then Redis
    for pid in "${PIDS[@]:1}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${PIDS[@]:1}"; do wait "$pid" 2>/dev/null; done
    kill -TERM "${PIDS[0]}" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$RUN"
}
trap stop EXIT

# the password reaches redis-server on its standard input (its config), not its command line
echo "requirepass $PASS" | redis-server - --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$RUN" \
    > "$LOGS/redis.log" 2>&1 &
PIDS+=($!)
export MLIR_FARM_BROKER="redis://:$PASS@127.0.0.1:$PORT/0" MLIR_FARM_OUT_ROOT="$(realpath -m "$OUT")" NCCL_NVLS_ENABLE=0
for _ in $(seq 50); do
    "$PY" -c "import os, redis; redis.Redis.from_url(os.environ['MLIR_FARM_BROKER']).ping()" 2>/dev/null && break
    sleep 0.2
done

for i in $(seq "$COMPILE_WORKERS"); do
    "$PY" -m celery -A orchestrator.celery_app worker -Q compile -n "compile$i@%h" -c 1 \
        --prefetch-multiplier=1 --without-gossip --without-mingle -l INFO > "$LOGS/compile$i.log" 2>&1 &
    PIDS+=($!)
done
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
for i in $(seq 0 $((GPUS - 1))); do
    CUDA_VISIBLE_DEVICES=$i "$PY" -m celery -A orchestrator.celery_app worker -Q gpu -n "gpu$i@%h" -P prefork -c 1 \
        --prefetch-multiplier=1 --max-tasks-per-child=1 --without-gossip --without-mingle -l INFO \
        > "$LOGS/gpu$i.log" 2>&1 &
    PIDS+=($!)
done
echo "farm: redis on 127.0.0.1:$PORT, $COMPILE_WORKERS compile worker(s), $GPUS GPU worker(s); logs in $LOGS"
"$PY" -m orchestrator.cli submit "$@" --out "$OUT"
