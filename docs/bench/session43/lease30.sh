#!/bin/bash
# Counts how often `dlock exec` loses a lock it holds for a second at a short lease (exit 76),
# per kind: the mutex, the read-write lock's write side (-x) and read side (-s), and a
# semaphore. It starts its own redis-server on PORT and needs the CLI at $DLOCK
# (go build -o /tmp/dlockcli ./cmd/dlock).
#   N=40 LEASES=30ms ./lease30.sh                     # quiet
#   N=40 LEASES=30ms under-load ./lease30.sh          # busy loops beside it
N=${N:-40}
PORT=${PORT:-16399}
DLOCK=${DLOCK:-/tmp/dlockcli}
redis-server --port "$PORT" --save '' --appendonly no --daemonize yes >/dev/null
sleep 0.5
for lease in ${LEASES:-30ms 50ms}; do
  for kind in mutex rw-x rw-s sem; do
    case $kind in
      mutex) f=();; rw-x) f=(-x);; rw-s) f=(-s);; sem) f=(--semaphore 3);;
    esac
    lost=0; other=0
    for i in $(seq "$N"); do
      "$DLOCK" exec --redis "127.0.0.1:$PORT" --lease "$lease" "${f[@]}" "t$kind" "k$i" -- sleep 1 2>/tmp/lease30.err
      rc=$?
      if [ $rc -eq 76 ]; then lost=$((lost+1)); elif [ $rc -ne 0 ]; then other=$((other+1)); cat /tmp/lease30.err; fi
    done
    echo "lease=$lease kind=$kind runs=$N lost=$lost other=$other"
  done
done
redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1
