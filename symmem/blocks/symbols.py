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

# DeepSeek-V3.2's lightning indexer and DeepSeek-V4 (declared after the V2/V3 sizes: earlier printing is unchanged)
n_I = declare("n_I", "n_I", "lightning indexer heads")
d_I = declare("d_I", "d_I", "lightning indexer head dimension")
k_I = declare("k_I", "k_I", "lightning indexer top-k (tokens, or compressed entries, a query attends to)")
d_k = declare("d_k", "d_k", "shared key/value head dimension (DeepSeek-V4: one KV head, K = V)")
n_g = declare("n_g", "n_g", "groups of the grouped low-rank output projection (o_groups)")
d_o = declare("d_o", "d_o", "rank of each output-projection group (o_lora_rank)")
n_hc = declare("m_hc", "m_{hc}", "hyper-connection streams (hc_mult)")
s_w = declare("s_w", "s_w", "sliding window")
m_C = declare("m_C", "m_C", "compression rate of CSA (compressed sparse attention)")
m_H = declare("m_H", "m_H", "compression rate of HCA (heavily compressed attention)")
