#!/bin/bash
# usage: callgrind-turn.sh PROC_TEST_BINARY [PORT]  (the binary: go test -c -o BIN ./processor)  -> Ir per relock turn (1500x run minus 500x run, /1000)
BIN=$1; PORT=${2:-7790}
redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; sleep 0.5
rm -f /tmp/cgx$PORT.*
valgrind --tool=callgrind --callgrind-out-file=/tmp/cgx$PORT.%p redis-server --port $PORT --save '' --appendonly no > /tmp/vgx.log 2>&1 &
for i in $(seq 40); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.5; done
REDIS_ADDR=127.0.0.1:$PORT $BIN -test.run XXX -test.bench 'BenchmarkGrantCycle/relock' -test.benchtime 100x >/dev/null 2>&1
tot() { callgrind_control -z >/dev/null; REDIS_ADDR=127.0.0.1:$PORT $BIN -test.run XXX -test.bench 'BenchmarkGrantCycle/relock' -test.benchtime ${1}x >/dev/null 2>&1; rm -f /tmp/cgx$PORT.*.*; callgrind_control -d >/dev/null; sleep 1; f=$(ls -t /tmp/cgx$PORT.*.* | head -1); grep -m1 "^summary:\|^totals:" $f | awk '{print $2}'; }
a=$(tot 500); b=$(tot 1500)
echo "Ir/turn: $(( (b - a) / 1000 ))  (500x: $a, 1500x: $b)"
redis-cli -p $PORT shutdown nosave >/dev/null 2>&1
