# Peak CPU memory for one fwd+bwd via profiler memory events (c10 CPU allocator reports; includes inductor buffers)
import sys, torch, block
from torch.profiler import profile, ProfilerActivity
def peak(fn):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    evs = sorted([e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"], key=lambda e: e.start_ns())
    cur = pk = 0
    for e in evs:
        cur += e.nbytes(); pk = max(pk, cur)
    return pk, cur
def main(dt, compiled, sac=False):
    m, x = block.make(dt)
    f = m
    if sac:
        import sac as S; f = S.Wrap(m)
    if compiled: f = torch.compile(f)
    def step():
        y = f(x); y.sum().backward()
    step(); step()   # warm up / compile
    x.grad = None; [setattr(p, "grad", None) for p in m.parameters()]
    return peak(step)
if __name__ == "__main__":
    for dt in (torch.float32, torch.bfloat16):
        for comp in (False, True):
            for sac in (False, True):
                torch._dynamo.reset()
                pk, end = main(dt, comp, sac)
                print(f"{str(dt):15} compiled={comp!s:5} sac={sac!s:5} peak_delta={pk} B  end_delta={end} B")
