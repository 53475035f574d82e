import json,glob,sys
rows=[]
for f in sorted(glob.glob('/tmp/perf/rows_*.jsonl')):
    for l in open(f):
        rows.append(json.loads(l))
print("%-6s %-8s %-6s %3s %8s %7s %7s %7s %7s %7s"%("bin","scen","impl","P","tps","cmd/acq","wcpu","rcpu","ho_p50","load"))
for r in rows:
    print("%-6s %-8s %-6s %3s %8.0f %7.3f %7.0f %7.0f %7.0f %7.2f"%(r['bin'],r['scenario'],r['impl'],r['procs'],r['tps'],r.get('cmds_per_acq',0),r.get('worker_cpu_us_per_acq',0),r.get('redis_cpu_us_per_acq',0),r['handoff_p50_us'],r.get('load1',0)))
