# Print partitioner's info log (banned ops) and the saved set under config variants.
import logging, sys, torch, block
logging.basicConfig(level=logging.WARNING)
lg = logging.getLogger("torch._functorch.partitioners"); lg.setLevel(logging.DEBUG)
import torch._functorch.config as fc
if len(sys.argv) > 1:
    k, v = sys.argv[1].split("="); setattr(fc, k, eval(v)); print("set", k, v)
from saved_compiled import run
from saved_eager import report
print(report(run(torch.float32), "probe"))
