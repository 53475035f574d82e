exec(open('cgdiff.py').read().split("res={}")[0])
import collections
exec("def cat(k):"+open('cgdiff.py').read().split("def cat(k):")[1].split("tot={b")[0])
for b in ['base','new']:
    for r in ['a','b']:
        x=per_acq(b,r); t=collections.Counter()
        for k,v in x.items(): t[cat(k)]+=v
        print(b,r," ".join("%s=%.1fk"%(c,t[c]/1000) for c in ['alloc/gc','go-redis','dlock','context','sched/syscall','runtime other','other']), "all=%.1fk"%(sum(t.values())/1000))
