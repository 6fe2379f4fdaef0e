"""The model sizes the blocks are written in, with the paper's names (arXiv 2502.07846, Table 1) where it has
them. A model family says which config key gives each (`symmem.families`); a block file that needs a new size
declares it with `symmem.symbols.declare`. Declaration order is the order inside a printed monomial.
"""

from symmem.symbols import declare

h = declare("h", "h", "hidden size")
d_cq = declare("d_cq", "d_{cq}", "query latent (LoRA) rank")
d_c = declare("d_c", "d_c", "key/value latent rank")
d_h = declare("d_h", "d_h", "per-head q/k dimension without rope")
d_v = declare("d_v", "d_v", "per-head value dimension (the paper's d_h where equal)")
d_hr = declare("d_hr", "d_{hr}", "per-head rope dimension")
n_h = declare("n_h", "n_h", "attention heads")
N = declare("N", "N", "routed experts")
N_r = declare("N_r", "N_r", "routed experts per token")
h_E = declare("h_E", "h_E", "expert FFN width")
h_F = declare("h_F", "h_F", "dense FFN width")
N_s = declare("N_s", "N_s", "shared experts")
V = declare("V", "V", "vocabulary size")
L = declare("L", "L", "decoder layers")
