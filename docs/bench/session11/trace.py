# usage: python3 trace.py  (reads /tmp/trd/w0.txt and w1.txt, written by a handoff row of the build of trace.diff run with TRDIR=/tmp/trd)
import sys, bisect, statistics as S
ev={}
for w in (0,1):
    d={}
    for l in open(f'/tmp/trd/w{w}.txt'):
        k,t=l.split(); d.setdefault(k,[]).append(int(t))
    for k in d: d[k].sort()
    ev[w]=d
def nxt(w,k,t):
    a=ev[w].get(k,[]); i=bisect.bisect_left(a,t)
    return a[i] if i<len(a) else None
keys=[('a',k) for k in ['a_send','a_go','a_redis','a_reply']]+[('b',k) for k in ['b_recv','b_msg','b_locked','b_begun','b_signalled','b_msgdone','b_woke','b_taken','t1']]
rows=[]
for a in (0,1):
    b=1-a
    for t0 in ev[a]['t0']:
        r={k:nxt(a if s=='a' else b,k,t0) for s,k in keys if k in ev[a if s=='a' else b]}
        if None in r.values() or 't1' not in r: continue
        if r['t1']-t0>5e6: continue
        rows.append({k:(v-t0)/1000 for k,v in r.items()})
print(len(rows))
for s,k in keys:
    if k not in rows[0]: continue
    v=sorted(r[k] for r in rows)
    print(f"{k:12s} p50 {S.median(v):8.1f}  p10 {v[len(v)//10]:8.1f} p90 {v[9*len(v)//10]:8.1f}")
