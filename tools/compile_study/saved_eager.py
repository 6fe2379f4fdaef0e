# List tensors saved for backward (eager, or any mode) via saved_tensors_hooks; producer via TorchDispatchMode.
import sys, torch, block
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

class Producer(TorchDispatchMode):
    def __init__(s): super().__init__(); s.last = {}
    def __torch_dispatch__(s, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for i, t in enumerate(tree_flatten(out)[0]):
            if isinstance(t, torch.Tensor):
                s.last[(t.data_ptr(), tuple(t.shape), t.stride())] = f"{func}" + (f"[{i}]" if i else "")
                s.last.setdefault(("st", t.untyped_storage().data_ptr()), None)
                if not func._schema.is_mutable and not any(r.alias_info for r in func._schema.returns):
                    s.last[("st", t.untyped_storage().data_ptr())] = f"{func}" + (f"[{i}]" if i else "")
        return out

def run(dtype, ctx_factory=None, model_fn=None, track=True):
    m, x = block.make(dtype)
    names = {p.untyped_storage().data_ptr(): "param:" + n for n, p in m.named_parameters()}
    names[x.untyped_storage().data_ptr()] = "input x"
    names[m.freqs_cis.untyped_storage().data_ptr()] = "buffer freqs_cis"
    saved = []
    prod = Producer()
    def pack(t):
        key = (t.data_ptr(), tuple(t.shape), t.stride())
        st = t.untyped_storage()
        src = names.get(st.data_ptr()) or prod.last.get(("st", st.data_ptr())) or prod.last.get(key) or "?"
        saved.append((src, tuple(t.shape), t.dtype, st.data_ptr(), st.nbytes(), t.stride()))
        return t
    f = model_fn(m) if model_fn else m
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if track:
            with prod: y = f(x)
        else:
            y = f(x)
    y.sum().backward()
    return saved

def report(saved, title):
    lines = [f"\n### {title}\n", "| # | producer | shape | dtype | storage bytes | note |", "|---|---|---|---|---|---|"]
    seen = set(); tot = 0; act = 0
    for i, (src, shp, dt, sp, nb, strd) in enumerate(saved):
        dup = sp in seen; seen.add(sp)
        if not dup:
            tot += nb
            if not (src.startswith("param") or src.startswith("input") or src.startswith("buffer")): act += nb
        lines.append(f"| {i} | {src} | {list(shp)} | {str(dt).replace('torch.','')} | {nb} | {'dup storage' if dup else ''} |")
    lines.append(f"\nUnique storages total = {tot} B; excluding params/input/buffer = {act} B\n")
    return "\n".join(lines)

if __name__ == "__main__":
    for dt in (torch.float32, torch.bfloat16):
        print(report(run(dt), f"Eager saved tensors, {dt}"))
