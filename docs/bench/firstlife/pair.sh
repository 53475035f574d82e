#!/bin/bash
# usage: pair.sh LEASE ROUNDS
for i in $(seq $2); do for b in old new; do /tmp/b$b --quick --json --redis 127.0.0.1:7777 --scenarios cross --impls dlock --procs 16 --lease $1 2>/dev/null | python3 -c "
import sys,json
for l in sys.stdin:
    r=json.loads(l); print('$1 $b', round(r['tps']), 'cmds', round(r['cmds_per_acq'],2), 'calls', round(r['redis_calls_per_acq'],1), 'proc', r['min_per_proc'], r['max_per_proc'], 'p99', round(r['wait_p99_us']), 'err', r['errors'], 'load', r['load1'], r.get('first_err','')[:200])" ; done; done
