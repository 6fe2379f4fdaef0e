# Compiled (inductor) saved tensors: pack hook on CompiledFunction's save_for_backward, plus aot_graphs logs.
import sys, torch, block
from saved_eager import report
def run(dtype, wrap=None):
    torch._dynamo.reset()
    m, x = block.make(dtype)
    names = {p.untyped_storage().data_ptr(): "param:" + n for n, p in m.named_parameters()}
    names[x.untyped_storage().data_ptr()] = "input x"
    names[m.freqs_cis.untyped_storage().data_ptr()] = "buffer freqs_cis"
    cm = torch.compile(wrap(m) if wrap else m)
    saved = []
    def pack(t):
        st = t.untyped_storage()
        saved.append((names.get(st.data_ptr(), "activation (see fw graph)"), tuple(t.shape), t.dtype, st.data_ptr(), st.nbytes(), t.stride()))
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = cm(x)
    y.sum().backward()
    # correctness vs eager
    m2, x2 = block.make(dtype); y2 = m2(x2); y2.sum().backward()
    print(f"# max |y-y_eager| = {(y-y2).abs().max().item():.3g}, max |dx-dx_eager| = {(x.grad-x2.grad).abs().max().item():.3g}")
    return saved
if __name__ == "__main__":
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1]]
    print(report(run(dt), f"Compiled (inductor) saved tensors, {dt}"))
