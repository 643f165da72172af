# Sums an Nsight Compute CSV (--metrics gpu__time_duration.sum --csv --page raw) by kernel name:
# time per step, launches per step and mean time per launch, largest first.
#   python3 ncu_summary.py NCU_CSV STEPS
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hi = next(i for i,r in enumerate(rows) if r and r[0]=="ID")
head = rows[hi]; units = rows[hi+1]
ni = head.index("Kernel Name"); ti = head.index("gpu__time_duration.sum"); gi=head.index("Grid Size")
u = units[ti]
scale={"nsecond":1e-3,"ns":1e-3,"usecond":1.0,"us":1.0,"msecond":1e3,"ms":1e3}[u]
seq=[(r[ni].split("(")[0][:50], float(r[ti].replace(",",""))*scale, r[gi]) for r in rows[hi+2:] if len(r)>ti]
steps = float(sys.argv[2]) if len(sys.argv) > 2 else 4
agg=collections.defaultdict(lambda:[0,0.0])
for n,t,g in seq: agg[n][0]+=1; agg[n][1]+=t
tot=sum(v[1] for v in agg.values())
print(f"total {tot/1e3:.3f} ms over {len(seq)} kernels -> per step {tot/steps/1e3:.3f} ms")
for n,(c,t) in sorted(agg.items(), key=lambda kv:-kv[1][1]):
    print(f"  {t/steps/1e3:8.3f} ms/step {c/steps:7.1f}/step x {t/c:8.1f} us  {n}")
