import subprocess,re,collections,sys
def self_costs(f):
    out=subprocess.run(['callgrind_annotate','--threshold=100',f],capture_output=True,text=True).stdout
    d=collections.Counter()
    for l in out.splitlines():
        m=re.match(r'\s*([\d,]+) \([^)]*\)\s+(\S+):(.*?) \[',l)
        if m:
            d[m.group(3)]+=int(m.group(1).replace(',',''))
    return d
def per_acq(b,r):
    a=self_costs(f'cg_{b}_900_{r}.out'); c=self_costs(f'cg_{b}_300_{r}.out')
    return {k:(a[k]-c.get(k,0))/600 for k in set(a)|set(c)}
res={}
for b in ['base','new']:
    runs=[per_acq(b,r) for r in ['a','b']]
    keys=set().union(*runs)
    res[b]={k:sum(x.get(k,0) for x in runs)/len(runs) for k in keys}
def cat(k):
    if k.startswith('runtime.') and any(s in k for s in ['schedule','findRunnable','stealWork','runqgrab','netpoll','futex','park','ready','wakep','mcall','gopark','goready','casgstatus','execute','lock2','unlock2','spin','osyield','procyield','usleep','notesleep','notewakeup','startm','stopm','handoff','gosched','checkTimers','timers','nanotime','pidle','runqsteal','runqget','runqput','globrunq','exitsyscall','entersyscall','reentersyscall','syscall','Syscall']): return 'sched/syscall'
    if k.startswith('runtime.') and any(s in k for s in ['malloc','newobject','makeslice','makechan','growslice','nextFree','heapBits','memclr','sweep','mspan','mcache','mcentral','mheap','gc','scan','mark','greyobject','wbBuf','bulkBarrier','special','Cleanup','convT','concatstring','slicebytetostring','rawstring']): return 'alloc/gc'
    if 'go-redis' in k or 'redis/go-redis' in k: return 'go-redis'
    if 'dlockgo/dlock' in k: return 'dlock'
    if k.startswith('context.'): return 'context'
    if k.startswith('runtime.'): return 'runtime other'
    return 'other'
tot={b:collections.Counter() for b in res}
for b in res:
    for k,v in res[b].items(): tot[b][cat(k)]+=v
print("%-16s %10s %10s"%("category","base","new"))
for c in sorted(set(tot['base'])|set(tot['new']), key=lambda c:-tot['base'][c]):
    print("%-16s %10.0f %10.0f"%(c,tot['base'][c],tot['new'][c]))
print("%-16s %10.0f %10.0f"%("all",sum(tot['base'].values()),sum(tot['new'].values())))
if len(sys.argv)>1:
    ks=sorted(set(res['base'])|set(res['new']), key=lambda k:-(res['base'].get(k,0)-res['new'].get(k,0)))
    for k in ks[:25]+ks[-10:]:
        print("%10.0f %10.0f  %s"%(res['base'].get(k,0),res['new'].get(k,0),k[:110]))
