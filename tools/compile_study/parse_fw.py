# Extract fw graph (first 'return (' after the forward TRACED GRAPH) from aot_graphs log; print defining line of each saved node.
import re, sys
lines = [re.sub(r'^.*\[__aot_graphs\] ?', '', l.rstrip('\n')) for l in open(sys.argv[1])]
# forward graph = first graph whose body has a return with primals outputs
start = next(i for i, l in enumerate(lines) if 'class GraphModule' in l and 'eval_with_key' in l) if False else None
defs = {}; ret = None
for i, l in enumerate(lines):
    m = re.match(r'\s+(\w+): "([^"]+)" = (.*)', l)
    if m and m.group(1) not in defs: defs[m.group(1)] = (m.group(2), m.group(3))
    if l.strip().startswith('return (') and ret is None and 'primals' in l:
        ret = [x.strip() for x in l.strip()[len('return ('):-1].split(',') if x.strip()]
        break
nuser = int(sys.argv[2]) if len(sys.argv) > 2 else 1
for n in ret[nuser:]:
    if n.startswith('primals'): print(f"| {n} | (graph input) | |"); continue
    t, e = defs[n]; print(f"| {n} | `{t}` | `{e[:110]}` |")
