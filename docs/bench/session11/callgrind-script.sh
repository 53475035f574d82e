#!/bin/bash
# usage: callgrind-script.sh SCRIPTFILE NUMKEYS KEYS... ARGS... -> Ir per evalsha (2000 minus 1000 calls)
F=$1; shift; PORT=7791
redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; sleep 0.3
rm -f /tmp/cgy.*
valgrind --tool=callgrind --callgrind-out-file=/tmp/cgy.%p redis-server --port $PORT --save '' --appendonly no > /tmp/vgy.log 2>&1 &
for i in $(seq 40); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.5; done
sha=$(redis-cli -p $PORT script load "$(cat $F)")
tot() { callgrind_control -z >/dev/null; for i in $(seq $1); do echo "evalsha $sha $*"; done | sed "s/^evalsha $sha $1 /evalsha $sha /" | redis-cli -p $PORT >/dev/null; rm -f /tmp/cgy.*.*; callgrind_control -d >/dev/null; sleep 0.5; f=$(ls -t /tmp/cgy.*.* | head -1); grep -m1 "^summary:\|^totals:" $f | awk '{print $2}'; }
a=$(tot 1000 "$@"); b=$(tot 2000 "$@")
echo "Ir/call: $(( (b - a) / 1000 ))"
redis-cli -p $PORT shutdown nosave >/dev/null 2>&1
