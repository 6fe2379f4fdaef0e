# Tiny Llama3 block mirroring torchtitan (classic llama3: separate wq/wk/wv, complex RoPE,
# SDPA causal, nn.RMSNorm, SwiGLU FFN).  Dims chosen so shapes are distinguishable.
import math, torch, torch.nn as nn, torch.nn.functional as F
DIM, NH, NKV, HID = 64, 4, 2, 160
HD = DIM // NH
B, S = 2, 32

def precompute_freqs_cis(dim, end, theta=500000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)

def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * fc).flatten(3)
    xk_out = torch.view_as_real(xk_ * fc).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)

class Attention(nn.Module):
    def __init__(s):
        super().__init__()
        s.wq = nn.Linear(DIM, NH * HD, bias=False)
        s.wk = nn.Linear(DIM, NKV * HD, bias=False)
        s.wv = nn.Linear(DIM, NKV * HD, bias=False)
        s.wo = nn.Linear(NH * HD, DIM, bias=False)
    def forward(s, x, freqs_cis):
        bs, sl, _ = x.shape
        xq, xk, xv = s.wq(x), s.wk(x), s.wv(x)
        xq = xq.view(bs, sl, NH, HD); xk = xk.view(bs, sl, NKV, HD); xv = xv.view(bs, sl, NKV, HD)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        rep = NH // NKV   # torchtitan repeat_kv: expand+reshape
        keys = xk[:, :, :, None, :].expand(bs, sl, NKV, rep, HD).reshape(bs, sl, NH, HD)
        values = xv[:, :, :, None, :].expand(bs, sl, NKV, rep, HD).reshape(bs, sl, NH, HD)
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        out = F.scaled_dot_product_attention(xq, keys, values, is_causal=True)
        out = out.transpose(1, 2).contiguous().view(bs, sl, -1)
        return s.wo(out)

class FeedForward(nn.Module):
    def __init__(s):
        super().__init__()
        s.w1 = nn.Linear(DIM, HID, bias=False); s.w2 = nn.Linear(HID, DIM, bias=False); s.w3 = nn.Linear(DIM, HID, bias=False)
    def forward(s, x):
        return s.w2(F.silu(s.w1(x)) * s.w3(x))

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.attention = Attention(); s.feed_forward = FeedForward()
        s.attention_norm = nn.RMSNorm(DIM, eps=1e-5); s.ffn_norm = nn.RMSNorm(DIM, eps=1e-5)
        s.register_buffer("freqs_cis", precompute_freqs_cis(HD, S), persistent=False)
    def forward(s, x):
        h = x + s.attention(s.attention_norm(x), s.freqs_cis)
        return h + s.feed_forward(s.ffn_norm(h))

def make(dtype):
    torch.manual_seed(0)
    m = Block()
    for p in m.parameters(): p.data = p.data.to(dtype)   # keep freqs_cis complex64 (as torchtitan: buffer not cast)
    x = torch.randn(B, S, DIM, dtype=dtype, requires_grad=True)
    return m, x
