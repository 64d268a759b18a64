import sys
from collections import OrderedDict
keys=[l.strip() for l in open(sys.argv[1]) if l.startswith('KEY')]
seen=[]; graphs=OrderedDict(); d=c=r=0
for k in keys:
    if k in graphs: graphs.move_to_end(k); r+=1; continue
    if k not in seen:
        seen.insert(0,k); seen=seen[:64]; d+=1; continue
    seen.remove(k); c+=1
    if len(graphs)>=64: graphs.popitem(last=False)
    graphs[k]=1
print(f"loops {len(keys)} distinct {len(set(keys))} direct {d} captures {c} replays {r}")
