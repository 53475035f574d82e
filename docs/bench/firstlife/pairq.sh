#!/bin/bash
for i in $(seq $1); do for b in old new; do /tmp/b$b --quick --json --redis 127.0.0.1:7777 --scenarios cross --impls dlock,floor --procs 4,16 2>/dev/null | python3 -c "
import sys,json
for l in sys.stdin:
    r=json.loads(l); print('$b', r['impl'], r['procs'], round(r['tps']), 'cmds', round(r['cmds_per_acq'],2), 'proc', r['min_per_proc'], r['max_per_proc'], 'p99', round(r['wait_p99_us']), 'err', r['errors'], 'load', r['load1'])" ; done; done
