#!/usr/bin/env python3
"""torch_sorter.py -- the PyTorch twin of sorter's Transformer.

The same function as model.hpp and train.hpp, written a second time with PyTorch so that
autograd, not our hand-written backward, computes the gradients. If both agree to about
1e-15 on logits, loss and the weights after one training step, the C++ backward is right.
Fine-tuning with LoRA (chapter 12) is checked over three Adam steps, with this file's own adapters,
on float and quantized bases (the integer product of chapter 09, QuantizedProduct below).

Read it beside model.hpp: each block below mirrors one C++ struct and keeps its name (the C++ ways a
chapter plugs in, Product and HeadAttention, are branches here: a Linear's quantized and adapter terms). The
twin works on a whole batch at once, so most tensors carry a leading batch axis B.

Legend: B batch, T target length, S source length, d_model token width, n_heads heads,
        d_k = d_model / n_heads, d_ff feed-forward width, V vocabulary size.

Modes:
  --check   run ../sorter for a list of variants with --dump-step and compare (make reference)
  --speed   train the twin on random sort batches and print training examples/s
Run it with a python3 that has PyTorch (make reference finds one; Debian's python3-torch is for /usr/bin/python3).
"""
import argparse
import ctypes
import math
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the model needs torch; --check and --speed say how to get it and skip
    torch = None

HOW_TO_GET_TORCH = ("Debian or Ubuntu: sudo apt-get install python3-torch, then run with /usr/bin/python3; "
                    "elsewhere: python3 -m pip install torch")
SORTER = Path(__file__).resolve().parent.parent / "sorter"  # the C++ program, built by make

PAD = 0             # token 0; digits are 1..max_digit and START is V - 1
MASKED = -1e9       # a blocked attention score is replaced by this, as model.hpp does
LAYER_NORM_EPS = 1e-5
TOLERANCE = 1e-9    # --check fails when any difference is larger
ZERO_ONE = {"1": True, "0": False}  # a yes/no in sorter's files


def choose(kind, name, table):
    """table[name] for a choice such as kind "activation", name "gelu". Every known value is a key of table, so
    a value sorter learns later fails here, naming itself, instead of running as one the twin already knows."""
    if name not in table:
        raise ValueError(f"unknown {kind} {name!r} (the twin knows {', '.join(map(repr, table))})")
    return table[name]


# =============================================================================================
# The model. Parameters are plain tensors with requires_grad, owned by the block that uses
# them, exactly as a C++ struct owns its Params; parameters() names them as the checkpoint does.
# =============================================================================================
@dataclass
class ModelConfig:  # struct ModelConfig
    vocab: int = 11
    max_len: int = 5
    d_model: int = 16
    n_heads: int = 2
    d_ff: int = 32
    enc_layers: int = 1
    dec_layers: int = 1
    norm: str = "pre"              # pre | post
    positions: str = "sinusoidal"  # sinusoidal | learned | none | rope | alibi (not sorter's random: see Embedding)
    activation: str = "relu"       # relu | gelu | swiglu
    embed_scale: bool = True
    tie_embeddings: bool = False   # the output projection is the embedding table, transposed
    rms_norm: bool = False         # RMSNorm in place of every LayerNorm
    kv_heads: int = 0              # key-value heads (grouped-query attention); 0: n_heads
    arch: str = "encoder-decoder"  # encoder-decoder | decoder-only
    attention: str = "plain"       # plain | flash: how sorter trains it; here, flash runs PyTorch's own
    no_bias: bool = False          # no bias in the feed-forward and the output projection (Llama's)
    experts: int = 0               # a mixture of experts (chapter 11): E feed-forwards and a router; 0: one
    top_k: int = 0                 # experts kept a token; 0: min(2, E)
    shared_experts: int = 0        # experts every token goes through
    balance: float = 0.01          # the balance loss's weight alpha

    def key_value_heads(self):
        return self.kv_heads or self.n_heads

    def kept_experts(self):  # top_k(): K
        return self.top_k or min(2, self.experts)


def xavier(rows, cols):
    """A new (rows, cols) parameter drawn from U(-a, a), a = sqrt(6 / (rows + cols))."""
    a = math.sqrt(6.0 / (rows + cols))
    return torch.empty(rows, cols).uniform_(-a, a).requires_grad_()


def constant(rows, cols, value):
    """A new (rows, cols) parameter filled with value (biases 0, LayerNorm gamma 1)."""
    return torch.full((rows, cols), float(value)).requires_grad_()


class Linear:  # struct Linear: y = x W + b, W stored (d_in, d_out), so no transpose as in nn.Linear
    def __init__(self, d_in, d_out, bias):
        self.W = xavier(d_in, d_out)                          # (d_in, d_out)
        self.b = constant(1, d_out, 0.0) if bias else None    # (1, d_out), or none for W_q..W_o

        self.quantized = None  # chapter 09: a quantized W's (whole numbers (d_out, d_in), scales, group)
        self.A = self.B = None  # chapter 12: an adapter, A (d_in, R), B (R, d_out), scale s; None: off
        self.s = 0.0

    def __call__(self, x):  # x (..., d_in) -> (..., d_out)
        y = x @ self.W if self.quantized is None else QuantizedProduct.apply(x, self.W, *self.quantized)
        if self.A is not None:  # Adapter::forward: y = x W + s (x A) B, W frozen
            y = y + ((x @ self.A) @ self.B) * self.s
        return y if self.b is None else y + self.b


def rounded(v):  # chapter 09's rounded(): to the nearest whole number, a half away from zero (torch.round: to even)
    size = v.abs()
    n = torch.trunc(size)
    return torch.sign(v) * (n + (size - n >= 0.5).to(v.dtype))


class QuantizedProduct(torch.autograd.Function if torch is not None else object):  # (no torch: --check skips)
    """quantized_product() (chapters/09_eight_bits.hpp), written on its own: x's rows quantized Q8_0 group by group
    (scale max|x| / 127), each group's sum of whole numbers (exact in float64: below 2^53), times the weight's scale
    and x's, the groups summed in order. Its backward is the dequantized W's, dx = dy W^T, as QLoRA's (and sorter's):
    the activations' rounding left out; W frozen, no gradient."""
    @staticmethod
    def forward(ctx, x, W, q, scales, group):  # x (..., d_in), W (d_in, d_out) dequantized, q (d_out, d_in)
        ctx.save_for_backward(W)
        n, d_in, G = x[..., 0].numel(), x.shape[-1], scales.shape[1]
        xg = x.reshape(n, G, group)
        scale_x = xg.abs().amax(dim=2) / 127                        # (n, G)
        safe = torch.where(scale_x == 0, torch.ones_like(scale_x), scale_x)
        qx = torch.where(scale_x[:, :, None] == 0, torch.zeros_like(xg), rounded(xg / safe[:, :, None]))
        sums = torch.einsum("ngk,jgk->njg", qx, q.view(-1, G, group))  # whole numbers, exact
        y = torch.zeros(n, q.shape[0], dtype=x.dtype)
        for g in range(G):
            y = y + sums[:, :, g] * scales[:, g] * scale_x[:, g:g + 1]  # (sum * scale_w) * scale_x, as sorter
        return y.view(*x.shape[:-1], q.shape[0])

    @staticmethod
    def backward(ctx, dy):
        (W,) = ctx.saved_tensors
        return dy @ W.T, None, None, None, None


def sinusoidal_table(max_len, d_model):  # sinusoidal_table(): (max_len, d_model)
    """sin on even columns, cos on odd; columns 2i and 2i+1 share the angle pos / 10000^(2i/d_model)."""
    rows = []
    for pos in range(max_len):
        row = []
        for c in range(d_model):
            angle = pos / math.pow(10000.0, (c - c % 2) / d_model)
            row.append(math.sin(angle) if c % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows)


class Embedding:  # struct Embedding: X[t] = table[token_t] * scale + P[t]; one table for source and target
    def __init__(self, c):
        if c.positions == "random":  # sorter draws the rows it reads; the twin has no copy of those draws
            raise ValueError("positions 'random' is sorter's, but the twin does not replay its drawn rows")
        self.table = xavier(c.vocab, c.d_model)                                        # (V, d_model)
        self.learned = xavier(c.max_len, c.d_model) if c.positions == "learned" else None
        self.fixed = sinusoidal_table(c.max_len, c.d_model)                            # never trained
        self.scale = math.sqrt(c.d_model) if c.embed_scale else 1.0
        self.positions = c.positions
        self.position_table()  # an unknown positions fails now, when the model is built

    def position_table(self):  # (max_len, d_model), or None: with no positions the model sees a bag of tokens
        return choose("positions", self.positions, {"sinusoidal": self.fixed, "learned": self.learned, "none": None,
                                                    "rope": None, "alibi": None})  # those two act in attention

    def __call__(self, tokens):  # tokens (B, T) -> X (B, T, d_model)
        X = self.table[tokens] * self.scale  # indexing is a gather; autograd scatter-adds it back
        P = self.position_table()
        return X if P is None else X + P[: tokens.shape[1]]


def padding_allowed(source):
    """(B, S) tokens -> (B, 1, 1, S) bool: True where a key is not PAD. Broadcasts over heads and queries."""
    return (source != PAD)[:, None, None, :]


def causal_allowed(T):
    """(T, T) bool: query t may look at keys 0..t, so teacher forcing cannot peek at the answer."""
    return torch.ones(T, T, dtype=torch.bool).tril()


def attention(Q, K, V, allowed, keep=None, bias=None):  # attention(): O = softmax(Q K^T / sqrt(d_k), blocked) V
    """Q (B, n_heads, T, d_k), K and V (B, n_heads, S, d_k), allowed broadcast to (B, n_heads, T, S) or None.
    keep (B, n_heads, T, S): attention dropout's factors, sorter's own masks replayed, or None.
    bias (n_heads, T, S): ALiBi's, added to the scores before the mask, or None.
    Returns O (B, n_heads, T, d_k)."""
    scores = (Q @ K.transpose(-2, -1)) * (1.0 / math.sqrt(Q.shape[-1]))  # (B, n_heads, T, S)
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = scores.masked_fill(~allowed, MASKED)  # replaced, not added: the C++ rule
    P = torch.softmax(scores, dim=-1)
    return (P if keep is None else P * keep) @ V


# A model sorter trains in tiles (--attention flash) is checked against PyTorch's fused attention,
# F.scaled_dot_product_attention (PyTorch 2.0 on), where it has it: the mask and ALiBi's bias go in as one added
# float mask (MASKED added rather than put in place: exp gives 0 either way, as no row here sees nothing). Attention
# dropout is not in it (its draws are PyTorch's): a step that drops weights replays sorter's factors in attention().
HAS_SDPA = torch is not None and hasattr(F, "scaled_dot_product_attention")


def fused_attention(Q, K, V, allowed, bias=None):
    added = torch.zeros(Q.shape[-2], K.shape[-2], dtype=Q.dtype) if bias is None else bias
    if allowed is not None:
        added = added + torch.zeros_like(allowed, dtype=Q.dtype).masked_fill(~allowed, MASKED)
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=added)


def rotate_pairs(X, sign=1.0):  # rotate_pairs(): X (B, heads, L, d_k), position t = its index along L
    """Each head's columns in pairs (2i, 2i+1) turned by the angle t / 10000^(2i / d_k): the RoFormer pairing."""
    B, H, L, d_k = X.shape
    t = torch.arange(L, dtype=X.dtype)[:, None]
    i = torch.arange(d_k // 2, dtype=X.dtype)[None, :]
    angle = sign * t / torch.pow(torch.tensor(10000.0, dtype=X.dtype), 2.0 * i / d_k)  # (L, d_k / 2)
    a, b = X[..., 0::2], X[..., 1::2]
    turned = torch.stack([a * torch.cos(angle) - b * torch.sin(angle), a * torch.sin(angle) + b * torch.cos(angle)],
                         dim=-1)  # (B, H, L, d_k / 2, 2): the pairs side by side again
    return turned.flatten(-2)


def alibi_slopes_of(n):  # alibi_slopes_of(): the paper's geometric slopes, one a head
    n0 = 1 << (n.bit_length() - 1)  # the largest power of two up to n
    return ([2.0 ** (-8.0 * h / n0) for h in range(1, n0 + 1)] +
            [2.0 ** (-4.0 * h / n0) for h in range(1, 2 * (n - n0), 2)])


class MultiHeadAttention:  # struct MultiHeadAttention: project, attend in n_heads slices of d_k columns, join, W_o
    def __init__(self, c, self_attention=False):
        self.n_heads, self.kv_heads, self.d_k = c.n_heads, c.key_value_heads(), c.d_model // c.n_heads
        self.W_q = Linear(c.d_model, c.d_model, bias=False)
        self.W_k = Linear(c.d_model, self.kv_heads * self.d_k, bias=False)  # grouped-query: kv_heads heads
        self.W_v = Linear(c.d_model, self.kv_heads * self.d_k, bias=False)
        self.W_o = Linear(c.d_model, c.d_model, bias=False)
        self.keep = None  # attention dropout's factors (B, n_heads, T, S) for one replayed step, or None
        self.rotary = self_attention and c.positions == "rope"
        self.slopes = torch.tensor(alibi_slopes_of(c.n_heads)) if self_attention and c.positions == "alibi" else None
        self.fused = c.attention == "flash" and HAS_SDPA  # sorter computes it in tiles: PyTorch's fused kernel here

    def split(self, x, heads):  # (B, L, heads d_k) -> (B, heads, L, d_k): head h owns columns h*d_k .. h*d_k + d_k - 1
        B, L, _ = x.shape
        return x.view(B, L, heads, self.d_k).transpose(1, 2)

    def __call__(self, x_q, x_kv, allowed):  # x_q (B, T, d_model), x_kv (B, S, d_model) -> (B, T, d_model)
        group = self.n_heads // self.kv_heads  # each K, V head serves `group` query heads, in order
        Q = self.split(self.W_q(x_q), self.n_heads)
        K = self.split(self.W_k(x_kv), self.kv_heads).repeat_interleave(group, dim=1)  # autograd sums the copies
        V = self.split(self.W_v(x_kv), self.kv_heads).repeat_interleave(group, dim=1)
        if self.rotary:
            Q, K = rotate_pairs(Q), rotate_pairs(K)
        bias = None
        if self.slopes is not None:  # -slope_h |i - j|: two-sided in the encoder, causal (masked) in the decoder
            T, S = x_q.shape[1], x_kv.shape[1]
            distance = (torch.arange(T)[:, None] - torch.arange(S)[None, :]).abs().to(x_q.dtype)
            bias = -self.slopes.to(x_q.dtype)[:, None, None] * distance  # (n_heads, T, S)
        if self.fused and self.keep is None:
            O = fused_attention(Q, K, V, allowed, bias)  # (B, n_heads, T, d_k)
        else:
            O = attention(Q, K, V, allowed, self.keep, bias)  # (B, n_heads, T, d_k)
        joined = O.transpose(1, 2).reshape(x_q.shape)    # (B, T, d_model): the heads side by side again
        return self.W_o(joined)

    def params(self, name):
        return [(f"{name}.{w}", getattr(self, w).W) for w in ("W_q", "W_k", "W_v", "W_o")]


class LayerNorm:  # struct LayerNorm: y = gamma (x - mean) / sqrt(var + eps) + beta, biased var, per row
    def __init__(self, d_model, rms=False):  # rms: RMSNorm, y = gamma x / sqrt(mean(x^2) + eps), no beta
        self.gamma = constant(1, d_model, 1.0)                    # (1, d_model)
        self.beta = None if rms else constant(1, d_model, 0.0)    # (1, d_model)

    def __call__(self, x):  # x (..., d_model) -> same shape; torch's layer_norm uses the biased variance too
        if self.beta is None:  # written out: older torch has no F.rms_norm
            return self.gamma[0] * x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + LAYER_NORM_EPS)
        return F.layer_norm(x, x.shape[-1:], self.gamma[0], self.beta[0], eps=LAYER_NORM_EPS)

    def params(self, name):
        return [(f"{name}.gamma", self.gamma)] + ([(f"{name}.beta", self.beta)] if self.beta is not None else [])


class FeedForward:  # struct FeedForward: y = act(x W_1 + b_1) W_2 + b_2, act ReLU or exact GELU; or SwiGLU
    def __init__(self, c):
        self.swiglu = choose("activation", c.activation, {"relu": False, "gelu": False, "swiglu": True})
        hidden = (2 * c.d_ff + 1) // 3 if self.swiglu else c.d_ff  # SwiGLU::width(): 2 d_ff / 3
        bias = not c.no_bias
        self.W_1 = Linear(c.d_model, hidden, bias=bias)  # (d_model -> hidden)
        self.W_2 = Linear(hidden, c.d_model, bias=bias)  # (hidden -> d_model)
        self.W_3 = Linear(c.d_model, hidden, bias=bias) if self.swiglu else None  # SwiGLU's partner
        self.act = {"relu": torch.relu, "gelu": F.gelu, "swiglu": F.silu}[c.activation]  # F.gelu: x Phi(x), no tanh

    def __call__(self, x):  # x (..., d_model) -> (..., d_model), hidden (..., hidden)
        if self.swiglu:
            return self.W_2(F.silu(self.W_1(x)) * self.W_3(x))
        return self.W_2(self.act(self.W_1(x)))

    def params(self, name):
        p = [(f"{name}.W_1", self.W_1.W), (f"{name}.b_1", self.W_1.b),
             (f"{name}.W_2", self.W_2.W), (f"{name}.b_2", self.W_2.b)]
        p += [(f"{name}.W_3", self.W_3.W), (f"{name}.b_3", self.W_3.b)] if self.swiglu else []
        return [(n, t) for n, t in p if t is not None]  # --no-bias: no b_1, b_2, b_3


class Experts:  # struct Experts (chapters/11_experts.hpp), written on its own: torch.sort, gather, index_add
    """out[r] = sum_k gate[r, k] expert_{chosen[r, k]}(x[r]) + sum_j shared_j(x[r]); gate = softmax over the K kept
    router scores; the K highest scores kept, a tie to the lower expert index (a stable sort, descending). Only the
    rows routed to an expert go through it. The balance loss alpha E sum_i f_i P_i is kept in balance_loss."""
    def __init__(self, c):
        self.K, self.alpha = c.kept_experts(), c.balance
        self.router = Linear(c.d_model, c.experts, bias=False)  # (d_model -> E)
        one = replace(c, experts=0, shared_experts=0)
        self.experts = [FeedForward(one) for _ in range(c.experts)]
        self.shared = [FeedForward(one) for _ in range(c.shared_experts)]
        self.balance_loss = 0.0

    def __call__(self, x):  # x (..., d_model): its rows in sorter's order (sequence by sequence)
        rows = x.reshape(-1, x.shape[-1])  # (n, d_model)
        scores = self.router(rows)  # (n, E)
        n, E = scores.shape
        chosen = torch.sort(scores.detach(), dim=1, descending=True, stable=True).indices[:, :self.K]  # (n, K)
        gate = torch.softmax(scores.gather(1, chosen), dim=1)  # (n, K)
        out = torch.zeros_like(rows)
        for i, expert in enumerate(self.experts):
            r, k = (chosen == i).nonzero(as_tuple=True)  # its rows, and the slot it holds in each
            if len(r) > 0:
                out = out.index_add(0, r, gate[r, k].unsqueeze(1) * expert(rows[r]))
        for expert in self.shared:
            out = out + expert(rows)
        share = torch.bincount(chosen.flatten(), minlength=E).to(rows.dtype) / (self.K * n)  # f_i: no gradient
        self.balance_loss = self.alpha * E * (share * torch.softmax(scores, dim=1).mean(dim=0)).sum()
        return out.view(x.shape)

    def params(self, name):
        p = [(f"{name}.router.W", self.router.W)]
        for i, expert in enumerate(self.experts):
            p += expert.params(f"{name}.experts.{i}")
        for j, expert in enumerate(self.shared):
            p += expert.params(f"{name}.shared.{j}")
        return p


def feed_forward_of(c):  # feed_forward_of(): experts when E > 0
    return Experts(c) if c.experts > 0 else FeedForward(c)


class Sublayer:  # struct Sublayer: pre-norm x + f(LN(x)), post-norm LN(x + f(x))
    def __init__(self, c):
        self.norm = LayerNorm(c.d_model, c.rms_norm)
        self.pre = choose("norm", c.norm, {"pre": True, "post": False})
        self.keep = None  # residual dropout's factors (B, L, d_model) for one replayed step, or None

    def input(self, x):  # what f reads
        return self.norm(x) if self.pre else x

    def output(self, x, f_out):  # the residual sum, normalised afterwards only in post-norm
        total = x + (f_out if self.keep is None else f_out * self.keep)
        return total if self.pre else self.norm(total)


class EncoderBlock:  # struct EncoderBlock: self-attention, then feed-forward.  x, out (B, S, d_model)
    def __init__(self, c):
        self.attn_sub, self.ffn_sub = Sublayer(c), Sublayer(c)
        self.self_attn = MultiHeadAttention(c, self_attention=True)
        self.ffn = feed_forward_of(c)

    def __call__(self, x, src_allowed):
        a = self.attn_sub.input(x)
        x1 = self.attn_sub.output(x, self.self_attn(a, a, src_allowed))
        return self.ffn_sub.output(x1, self.ffn(self.ffn_sub.input(x1)))

    def params(self, name):
        return (self.attn_sub.norm.params(f"{name}.norm1") + self.self_attn.params(f"{name}.self_attn") +
                self.ffn_sub.norm.params(f"{name}.norm2") + self.ffn.params(f"{name}.ffn"))


class DecoderBlock:  # struct DecoderBlock: causal self-attention, cross-attention, feed-forward.  y (B, T, d_model)
    def __init__(self, c):  # decoder-only: no cross-attention (cross False)
        self.cross = choose("arch", c.arch, {"encoder-decoder": True, "decoder-only": False})
        self.self_sub, self.cross_sub, self.ffn_sub = Sublayer(c), Sublayer(c), Sublayer(c)
        self.self_attn = MultiHeadAttention(c, self_attention=True)
        self.cross_attn = MultiHeadAttention(c) if self.cross else None
        self.ffn = feed_forward_of(c)

    def __call__(self, y, memory, causal, memory_allowed):  # memory (B, S, d_model), or None
        a = self.self_sub.input(y)
        y1 = self.self_sub.output(y, self.self_attn(a, a, causal))
        if not self.cross:
            return self.ffn_sub.output(y1, self.ffn(self.ffn_sub.input(y1)))
        y2 = self.cross_sub.output(y1, self.cross_attn(self.cross_sub.input(y1), memory, memory_allowed))
        return self.ffn_sub.output(y2, self.ffn(self.ffn_sub.input(y2)))

    def params(self, name):
        if not self.cross:
            return (self.self_sub.norm.params(f"{name}.norm1") + self.self_attn.params(f"{name}.self_attn") +
                    self.ffn_sub.norm.params(f"{name}.norm2") + self.ffn.params(f"{name}.ffn"))
        return (self.self_sub.norm.params(f"{name}.norm1") + self.self_attn.params(f"{name}.self_attn") +
                self.cross_sub.norm.params(f"{name}.norm2") + self.cross_attn.params(f"{name}.cross_attn") +
                self.ffn_sub.norm.params(f"{name}.norm3") + self.ffn.params(f"{name}.ffn"))


class Transformer:  # struct Transformer: embed, encoder blocks, decoder blocks, final LayerNorm, out
    def __init__(self, c):
        self.config = c
        self.embed = Embedding(c)
        self.encoder = [EncoderBlock(c) for _ in range(c.enc_layers)]  # none when decoder-only
        self.decoder = [DecoderBlock(c) for _ in range(c.dec_layers)]
        self.final_norm = LayerNorm(c.d_model, c.rms_norm)
        self.out = Linear(c.d_model, c.vocab, bias=not c.no_bias)  # (d_model -> V)
        self.keep = {}  # dropout's factors by sorter's names, for one replayed step (replay_masks)
        if c.tie_embeddings:  # output(): logits = h table^T + b; autograd sums the table's three uses
            self.out.W = None

    def encode(self, source):  # source (B, S) -> memory (B, S, d_model)
        x = self.embed(source)
        if "embed.source" in self.keep:
            x = x * self.keep["embed.source"]
        for block in self.encoder:
            x = block(x, padding_allowed(source))
        return x

    def decode(self, target_in, memory, source):  # target_in (B, T) -> logits (B, T, V)
        if self.config.arch == "decoder-only":
            return self.read_whole(source, target_in)
        y = self.embed(target_in)
        if "embed.target" in self.keep:
            y = y * self.keep["embed.target"]
        causal = causal_allowed(target_in.shape[1])
        for block in self.decoder:
            y = block(y, memory, causal, padding_allowed(source))
        h = self.final_norm(y)
        return self.out(h) if self.out.W is not None else self.tied(h)

    def tied(self, h):  # Transformer::output, tied: logits = h table^T (+ b)
        quantized = getattr(self.embed, "quantized", None)  # an 8-bit table: (whole numbers, scales, group)
        logits = h @ self.embed.table.T if quantized is None else QuantizedProduct.apply(h, self.embed.table.T,
                                                                                          *quantized)
        return logits if self.out.b is None else logits + self.out.b

    def read_whole(self, source, target_in):  # DecoderOnly::forward (chapter 06): source + START + answer, one sequence
        S = source.shape[1]
        whole = torch.cat([source, target_in], dim=1)  # (B, L)
        y = self.embed(whole)
        if "embed.whole" in self.keep:
            y = y * self.keep["embed.whole"]
        L = whole.shape[1]
        key_seen = torch.cat([source != PAD, torch.ones_like(target_in, dtype=torch.bool)], dim=1)  # (B, L)
        allowed = causal_allowed(L)[None, None] & key_seen[:, None, None, :]  # (B, 1, L, L)
        for block in self.decoder:
            y = block(y, None, allowed, None)
        h = self.final_norm(y[:, S:])  # the answer's rows, from START on
        return self.out(h) if self.out.W is not None else self.tied(h)

    def forward(self, source, target_in):
        if self.config.arch == "decoder-only":
            return self.read_whole(source, target_in)
        return self.decode(target_in, self.encode(source), source)

    def balance_loss(self):  # balance_loss_of(): every block's, from the last forward; 0 without experts
        return sum(block.ffn.balance_loss for block in self.encoder + self.decoder if isinstance(block.ffn, Experts))

    def replay_masks(self, masks, B, S, T):
        """Dropout as sorter drew it: masks, by sorter's names (dropout_masks() in checkpoint.hpp), each (rows,
        cols) as sorter stacks a batch, reshaped to this twin's (B, L, d_model) or (B, n_heads, T, S)."""
        H = self.config.n_heads
        self.keep = {name: masks[name].view(B, -1, m.shape[1]) for name, m in masks.items() if name.startswith("embed")}
        places = [(f"encoder.{i}", b, [("attn_sub", S), ("ffn_sub", S)], [("self_attn", S)])
                  for i, b in enumerate(self.encoder)]
        L = S + T if self.config.arch == "decoder-only" else T  # decoder-only: the whole sequence's rows
        places += [(f"decoder.{i}", b, [("self_sub", L), ("cross_sub", L), ("ffn_sub", L)],
                    [("self_attn", L), ("cross_attn", L)] if b.cross else [("self_attn", L)])
                   for i, b in enumerate(self.decoder)]
        for name, block, sublayers, attentions in places:
            for sub, L in sublayers:
                m = masks.get(f"{name}.{sub}")
                getattr(block, sub).keep = None if m is None else m.view(B, L, -1)
            for attn, L in attentions:
                m = masks.get(f"{name}.{attn}")
                getattr(block, attn).keep = None if m is None else m.view(B, H, L, -1)

    def parameters(self):
        """Every learned tensor with its checkpoint name, in Transformer::parameters() order."""
        p = [("embed.table", self.embed.table)]
        if self.embed.learned is not None:
            p.append(("embed.positions", self.embed.learned))
        for i, block in enumerate(self.encoder):
            p += block.params(f"encoder.{i}")
        for i, block in enumerate(self.decoder):
            p += block.params(f"decoder.{i}")
        p += self.final_norm.params("final_norm")
        p += [("out.W", self.out.W)] if self.out.W is not None else []
        p += [("out.b", self.out.b)] if self.out.b is not None else []  # --no-bias: none
        return p


# =============================================================================================
# Loss, SGD and greedy decoding (train.hpp)
# =============================================================================================
def cross_entropy(logits, target, label_smoothing=0.0):
    """logits (B, T, V), target (B, T) -> the batch's mean loss.
    sorter takes the mean over an example's T positions (PAD targets count: PAD ends the output),
    then the mean over the batch; every example has the same T, so that is the mean of all B*T.
    Label smoothing is PyTorch's own: target (1 - E) one_hot + E / V, as train.hpp's cross_entropy."""
    B, T, V = logits.shape
    return F.cross_entropy(logits.reshape(B * T, V), target.reshape(B * T), label_smoothing=label_smoothing)


def zero_grad(params):
    for _, p in params:
        p.grad = None


def sgd_update(params, lr):  # SGD: w -= lr * grad
    with torch.no_grad():
        for _, p in params:
            p -= lr * p.grad


def decays(name):  # chapter 03's decays(): the matrices shrink (LoRA's adapters too), not biases, gamma or beta
    last = name.rsplit(".", 1)[-1]
    return last.startswith("W") or last in ("table", "positions", "lora_A", "lora_B")


def sgd_step(params, lr, decay, momentum):  # PyTorch's SGD adds weight_decay to the gradient, so decay is here
    with torch.no_grad():
        for n, p in params:
            if decays(n):
                p.mul_(1.0 - lr * decay)
    torch.optim.SGD([p for _, p in params], lr=lr, momentum=momentum).step()


def adamw_step(params, lr, decay):  # AdamW's decay is decoupled already; it shrinks only what decays()
    groups = [{"params": [p for n, p in params if decays(n)], "weight_decay": decay},
              {"params": [p for n, p in params if not decays(n)], "weight_decay": 0.0}]
    torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98), eps=1e-9).step()


def update(params, lr, training):
    """One step of the checkpoint's optimizer (train.hpp's Optimizer::update) with PyTorch's own pieces:
    clip_grad_norm_, SGD (momentum 0.9), AdamW (betas 0.9, 0.98, eps 1e-9). Decoupled weight decay is AdamW's
    own; for SGD and momentum, whose weight_decay PyTorch adds to the gradient instead, it is written here.
    Returns the gradients' global norm before clipping."""
    clip, decay = float(training.get("clip", 0)), float(training.get("weight_decay", 0))
    step = choose("optimizer", training.get("optimizer", "sgd"), {  # version 1 has no training section: sgd
        "sgd": lambda: sgd_step(params, lr, decay, momentum=0.0),
        "momentum": lambda: sgd_step(params, lr, decay, momentum=0.9),
        "adam": lambda: adamw_step(params, lr, decay)})
    tensors = [p for _, p in params]
    norm = float(torch.nn.utils.clip_grad_norm_(tensors, clip) if clip > 0 else
                 torch.sqrt(sum((p.grad ** 2).sum() for p in tensors)))
    step()
    return norm


def token_label(token, vocab):
    """How sorter prints a token: PAD as _, START as S, a digit as itself."""
    return "_" if token == PAD else "S" if token == vocab - 1 else str(token)


def greedy_decode(model, source, length):  # greedy_decode(): source (S ints) -> length ints
    """Encode once, then append the argmax of the last position's logits over PAD and the digits (START is
    an input, never an output), one token at a time; after the first PAD, PAD. torch.argmax keeps the first
    of equal maxima, as the C++ loop does."""
    with torch.no_grad():
        src = torch.tensor([source])
        memory = model.encode(src)
        start = model.config.vocab - 1
        decoded = [start]
        for _ in range(length):
            if decoded[-1] == PAD:  # the output has ended
                decoded.append(PAD)
                continue
            logits = model.decode(torch.tensor([decoded]), memory, src)  # (1, len(decoded), V)
            decoded.append(int(torch.argmax(logits[0, -1, :start])))
        return decoded[1:]


def beam_search(model, source, length, K, alpha):
    """workbench/beam.hpp's beam_search, written plainly: each step decodes every live prefix afresh (no
    cache) and keeps the K best candidates by log P / ((5 + length) / 6)^alpha, length counted up to the
    first PAD. A hypothesis that has emitted PAD is finished: its one candidate is itself, PAD again, its
    log P and score unchanged. START is never a candidate. Returns [(tokens, log P)], best first. sorted()
    is stable: of equal scores the earlier candidate stays."""
    with torch.no_grad():
        src = torch.tensor([source])
        memory = model.encode(src)
        beams, start = [([], 0.0)], model.config.vocab - 1
        for _ in range(length):
            candidates = []
            for tokens, log_prob in beams:
                if PAD in tokens:  # finished
                    penalty = ((5.0 + tokens.index(PAD) + 1) / 6.0) ** alpha
                    candidates.append((tokens + [PAD], log_prob, log_prob / penalty))
                    continue
                logits = model.decode(torch.tensor([[start] + tokens]), memory, src)[0, -1]  # (V,)
                log_p = torch.log_softmax(logits, dim=-1)
                penalty = ((5.0 + len(tokens) + 1) / 6.0) ** alpha
                candidates += [(tokens + [v], log_prob + float(log_p[v]), (log_prob + float(log_p[v])) / penalty)
                               for v in range(start)]
            beams = [(tokens, lp) for tokens, lp, _ in sorted(candidates, key=lambda c: -c[2])[:K]]
        return beams


# =============================================================================================
# Reading sorter's files: checkpoints (workbench/checkpoint.hpp) and step dumps (--dump-step)
# =============================================================================================
@dataclass
class Checkpoint:
    header: dict    # key -> value text, in file order, e.g. "d_model" -> "16"
    tensors: dict   # name -> (ROWS, COLS) float64 tensor
    training: dict = field(default_factory=dict)  # the training section's key -> value text (versions 2 on)
    quantized: dict = field(default_factory=dict)  # an 8-bit model's (chapter 09): name -> (q, scales, group)
    adapters: dict = field(default_factory=dict)  # version 10, a LoRA run under way (chapter 12): "W.lora_A" -> tensor


def parse_checkpoint(text):
    """The checkpoint text (whitespace-separated words) -> Checkpoint."""
    words = text.split()
    if words[:1] != ["sorter-checkpoint"] or words[1:2] not in ([str(v)] for v in range(1, 11)):
        raise ValueError(f"not a sorter checkpoint, version 1 to 10 (starts {' '.join(words[:2])!r})")
    at, header = 2, {}
    while words[at] != "tensor":  # key value pairs up to and including "tensors N"
        header[words[at]] = words[at + 1]
        at += 2
    tensors, quantized, adapters, bits = {}, {}, {}, int(header.get("bits", "0"))
    for _ in range(int(header["tensors"])):
        _, name, rows, cols = words[at:at + 4]
        rows, cols, at = int(rows), int(cols), at + 4
        last = name.rsplit(".", 1)[-1]
        if bits > 0 and (last.startswith("W") or last == "table"):  # chapter 09: lines of scales, then whole numbers
            lines, width = (rows, cols) if last == "table" else (cols, rows)  # a W (d_in, d_out) kept transposed
            group = 64 if bits == 8 else 32
            while width % group:
                group //= 2
            G = width // group
            values = torch.tensor([float(w) for w in words[at:at + lines * (G + width)]]).view(lines, G + width)
            at += lines * (G + width)
            scales, q = values[:, :G].float().double(), values[:, G:]  # (lines, G): float32s, (lines, width)
            quantized[name] = (q, scales, group)
            deq = (q.view(lines, G, group) * scales[:, :, None]).view(lines, width)  # dequantize(): q x scale
            tensors[name] = deq if last == "table" else deq.T.contiguous()
            continue
        values = [float(w) for w in words[at:at + rows * cols]]  # %.17g reads back to the same double
        kept = adapters if last in ("lora_A", "lora_B") else tensors  # the base's, then the adapters' (version 10)
        kept[name] = torch.tensor(values, dtype=torch.float64).view(rows, cols)
        at += rows * cols
    training = {}
    if words[at] == "training":  # versions 2 to 5: the settings, then (momentum, Adam) the running means
        at += 1
        while words[at] not in ("m", "end"):
            key = words[at]
            training[key] = words[at + 1:at + 3] if key == "train_data" else words[at + 1]
            at += 3 if key == "train_data" else 2
        at = len(words) - 1  # one step from a fresh start: no running means yet to compare
    if words[at:] != ["end"]:
        raise ValueError("checkpoint: expected 'end' after the last tensor")
    return Checkpoint(header, tensors, training, quantized, adapters)


def parse_adapters(text):
    """An adapters file (--save-adapters, workbench/lora.hpp) -> {"scale": alpha / R, name: (ROWS, COLS) tensor}."""
    words = text.split()
    if words[:2] != ["sorter-adapters", "1"] or words[4] != "rank" or words[6] != "alpha" or words[8] != "tensors":
        raise ValueError(f"not a sorter adapters file, version 1 (starts {' '.join(words[:2])!r})")
    adapters, at = {"scale": float(words[7]) / int(words[5])}, 10
    for _ in range(int(words[9])):
        _, name, rows, cols = words[at:at + 4]
        rows, cols, at = int(rows), int(cols), at + 4
        adapters[name] = torch.tensor([float(w) for w in words[at:at + rows * cols]]).view(rows, cols)
        at += rows * cols
    if words[at:] != ["end"]:
        raise ValueError("adapters: expected 'end' after the last tensor")
    return adapters


def config_from_header(h):
    return ModelConfig(vocab=int(h["vocab"]), max_len=int(h["max_len"]), d_model=int(h["d_model"]),
                       n_heads=int(h["n_heads"]), d_ff=int(h["d_ff"]), enc_layers=int(h["enc_layers"]),
                       dec_layers=int(h["dec_layers"]), norm=h["norm"], positions=h["positions"],
                       activation=h["activation"], embed_scale=choose("embed_scale", h["embed_scale"], ZERO_ONE),
                       tie_embeddings=choose("tie_embeddings", h.get("tie_embeddings", "0"), ZERO_ONE),  # 0 before v3
                       rms_norm=choose("rms_norm", h.get("rms_norm", "0"), ZERO_ONE),  # version 6 on
                       kv_heads=int(h.get("kv_heads", h["n_heads"])), arch=h.get("arch", "encoder-decoder"),
                       attention=h.get("attention", "plain"),  # version 7 on
                       no_bias=choose("no_bias", h.get("no_bias", "0"), ZERO_ONE),  # version 7 on
                       experts=int(h.get("experts", "0")), top_k=int(h.get("top_k", "0")),  # version 8 on
                       shared_experts=int(h.get("shared_experts", "0")), balance=float(h.get("balance", "0.01")))


def model_from_checkpoint(ck):
    """Build the model the header describes and copy every tensor in by name."""
    model = Transformer(config_from_header(ck.header))
    names = [name for name, _ in model.parameters()]
    if sorted(names) != sorted(ck.tensors):
        raise ValueError(f"checkpoint tensors {sorted(ck.tensors)} != the model's {sorted(names)}")
    with torch.no_grad():
        for name, p in model.parameters():
            p.copy_(ck.tensors[name])
    places = linears_of(model)
    for name, (q, scales, group) in ck.quantized.items():  # 8 bits: the product in whole numbers (chapter 09)
        if name == "embed.table":
            model.embed.quantized = (q, scales, group)  # read by the tied output (the embedding reads its values)
        else:
            places[name].quantized = (q, scales, group)
    return model


def linears_of(model):
    """Every Linear by its W's checkpoint name ("encoder.0.self_attn.W_q"), as each_adaptable() names them."""
    found = {"out.W": model.out}
    for part, blocks in (("encoder", model.encoder), ("decoder", model.decoder)):
        for i, block in enumerate(blocks):
            for attn in ("self_attn", "cross_attn"):
                if getattr(block, attn, None) is not None:
                    found.update({f"{part}.{i}.{attn}.{w}": getattr(getattr(block, attn), w)
                                  for w in ("W_q", "W_k", "W_v", "W_o")})
            ffns = [("ffn", block.ffn)] if isinstance(block.ffn, FeedForward) else (  # experts: each one's
                [(f"ffn.experts.{j}", e) for j, e in enumerate(block.ffn.experts)] +
                [(f"ffn.shared.{j}", e) for j, e in enumerate(block.ffn.shared)])
            if isinstance(block.ffn, Experts):  # the router: a Linear no adapter sits on (a quantized one is read)
                found[f"{part}.{i}.ffn.router.W"] = block.ffn.router
            for name, ffn in ffns:
                found.update({f"{part}.{i}.{name}.{w}": getattr(ffn, w) for w in ("W_1", "W_2", "W_3")
                              if getattr(ffn, w) is not None})
    return found


@dataclass
class StepDump:
    lr: float
    sources: list = field(default_factory=list)      # B lists of S tokens
    targets_in: list = field(default_factory=list)   # B lists of T tokens
    targets: list = field(default_factory=list)      # B lists of T tokens
    logits: list = field(default_factory=list)       # B tensors (T, V), before the update
    masks: dict = field(default_factory=dict)        # dropout's factors by name, (rows, cols) as sorter stacks them
    loss: float = 0.0                                # the batch's mean cross-entropy, before the update
    smoothed_loss: float = None                      # with label smoothing: the smoothed loss training follows
    checkpoint: Checkpoint = None                    # the model before the step
    adapters: dict = None                            # fine-tuning (chapter 12): parse_adapters() of the step's
    later: list = field(default_factory=list)        # fine-tuning: the next steps' (lr, sources, targets_in, targets)


def parse_step_dump(text):
    lines = text.splitlines()
    if lines[0] != "sorter-step 1":
        raise ValueError(f"not a sorter step dump, version 1 (first line {lines[0]!r})")
    at = 1

    def take(key):  # the words after `key` on the next line
        nonlocal at
        words = lines[at].split()
        if not words or words[0] != key:
            raise ValueError(f"step dump line {at + 1}: expected {key!r}, found {lines[at]!r}")
        at += 1
        return words[1:]

    dump = StepDump(lr=float(take("lr")[0]))
    for _ in range(int(take("examples")[0])):
        take("example")
        dump.sources.append([int(w) for w in take("source")])
        dump.targets_in.append([int(w) for w in take("target_in")])
        dump.targets.append([int(w) for w in take("target")])
        T, V = (int(w) for w in take("logits"))
        rows = [[float(w) for w in line.split()] for line in lines[at:at + T]]
        dump.logits.append(torch.tensor(rows, dtype=torch.float64).view(T, V))  # view checks the count
        at += T
    if lines[at].startswith("masks "):  # only with dropout on
        for _ in range(int(take("masks")[0])):
            name, rows, cols = take("mask")
            values = [[float(w) for w in line.split()] for line in lines[at:at + int(rows)]]
            dump.masks[name] = torch.tensor(values, dtype=torch.float64).view(int(rows), int(cols))
            at += int(rows)
    dump.loss = float(take("loss")[0])
    if lines[at].startswith("smoothed_loss "):  # only with label smoothing on
        dump.smoothed_loss = float(take("smoothed_loss")[0])
    if lines[at] == "adapters":  # fine-tuning: the adapters before the step, as their file, then the next batches
        end = lines.index("end", at)
        dump.adapters = parse_adapters("\n".join(lines[at + 1:end + 1]))
        at = end + 1
        for _ in range(int(take("later_steps")[0])):
            words = take("step")  # K lr X examples B
            batch = [[[int(w) for w in take(key)] for key in ("source", "target_in", "target")]
                     for _ in range(int(words[4]))]
            dump.later.append((float(words[2]), *([example[k] for example in batch] for k in range(3))))
    take("checkpoint")
    dump.checkpoint = parse_checkpoint("\n".join(lines[at:]))
    return dump


# =============================================================================================
# --check: one SGD step here and in sorter, for every variant
# =============================================================================================
VARIANTS = [  # (name, sorter flags)
    ("default", []),
    ("post-norm", ["--norm", "post"]),
    ("learned positions", ["--pos", "learned"]),
    ("no positions", ["--pos", "none"]),
    ("gelu", ["--act", "gelu"]),
    ("no embedding scale", ["--no-embed-scale"]),
    ("layers 2+2", ["--enc-layers", "2", "--dec-layers", "2"]),
    ("min-len 2 (padded sources)", ["--min-len", "2"]),
    ("task copy", ["--task", "copy"]),
    ("task reverse", ["--task", "reverse"]),
    ("momentum", ["--optimizer", "momentum"]),
    ("adam", ["--optimizer", "adam"]),
    ("dropout 0.1", ["--dropout", "0.1"]),
    ("attention dropout 0.1", ["--attn-dropout", "0.1"]),
    ("dropout, post-norm, 2+2", ["--dropout", "0.2", "--attn-dropout", "0.2", "--norm", "post", "--enc-layers", "2",
                                 "--dec-layers", "2", "--min-len", "2"]),
    ("tied embeddings", ["--tie-embeddings"]),
    ("label smoothing 0.1", ["--label-smoothing", "0.1"]),
    ("clip 0.5", ["--clip", "0.5"]),
    ("weight decay 0.5", ["--weight-decay", "0.5"]),
    ("momentum, weight decay 0.5", ["--optimizer", "momentum", "--weight-decay", "0.5"]),
    ("adamw (adam, decay 0.5)", ["--optimizer", "adam", "--weight-decay", "0.5"]),
    ("combined", ["--norm", "post", "--pos", "learned", "--act", "gelu", "--d-model", "8", "--heads", "4",
                  "--seq-len", "7", "--min-len", "3", "--max-digit", "5"]),
    ("rmsnorm", ["--rmsnorm"]),
    ("rmsnorm, post-norm", ["--rmsnorm", "--norm", "post"]),
    ("swiglu", ["--act", "swiglu"]),
    ("rope", ["--pos", "rope", "--min-len", "2"]),
    ("alibi (3 heads)", ["--pos", "alibi", "--heads", "3", "--d-model", "18", "--min-len", "2"]),
    ("gqa (4 heads on 2)", ["--heads", "4", "--kv-heads", "2"]),
    ("multi-query (4 on 1)", ["--heads", "4", "--kv-heads", "1"]),
    ("today's blocks, 2+2", ["--rmsnorm", "--act", "swiglu", "--pos", "rope", "--heads", "4", "--kv-heads", "2",
                             "--enc-layers", "2", "--dec-layers", "2", "--dropout", "0.1", "--min-len", "3"]),
    ("decoder-only", ["--arch", "decoder-only", "--dec-layers", "2", "--min-len", "2"]),
    ("decoder-only, learned, dropout", ["--arch", "decoder-only", "--pos", "learned", "--dropout", "0.1",
                                        "--attn-dropout", "0.1", "--task", "reverse"]),
    ("decoder-only, alibi, post-norm", ["--arch", "decoder-only", "--pos", "alibi", "--norm", "post", "--min-len", "3"]),
    ("no bias", ["--no-bias"]),
    ("no bias, tied embeddings", ["--no-bias", "--tie-embeddings"]),
    ("llama (4 heads on 2), 2 layers", ["--llama", "--heads", "4", "--dec-layers", "2", "--min-len", "2",
                                        "--dropout", "0.1", "--optimizer", "adam"]),
    ("flash", ["--attention", "flash", "--min-len", "2"]),
    ("flash, decoder-only, alibi, gqa", ["--attention", "flash", "--arch", "decoder-only", "--pos", "alibi",
                                         "--heads", "4", "--kv-heads", "2", "--min-len", "3", "--dec-layers", "2"]),
    ("flash, rope, 2+2, attn dropout", ["--attention", "flash", "--pos", "rope", "--enc-layers", "2",
                                        "--dec-layers", "2", "--attn-dropout", "0.2", "--min-len", "2"]),
    ("flash, seq-len 40 (tiles)", ["--attention", "flash", "--arch", "decoder-only", "--seq-len", "40",
                                   "--min-len", "30", "--task", "reverse"]),
    ("experts 4, top-1, no balance", ["--experts", "4", "--top-k", "1", "--balance", "0"]),
    ("experts 4, top-1, balance 0.1", ["--experts", "4", "--top-k", "1", "--balance", "0.1", "--min-len", "2"]),
    ("experts 4, top-2", ["--experts", "4", "--top-k", "2"]),
    ("experts, top-2, shared, bal 0.5", ["--experts", "4", "--shared-experts", "1", "--balance", "0.5",
                                            "--act", "gelu", "--enc-layers", "2"]),
    ("experts, dec-only, top-1, shared", ["--experts", "4", "--top-k", "1", "--shared-experts", "1",
                                             "--arch", "decoder-only", "--min-len", "2", "--balance", "0.3"]),
    ("experts, dec-only, top-2, swiglu", ["--experts", "4", "--top-k", "2", "--arch", "decoder-only",
                                             "--act", "swiglu", "--no-bias", "--balance", "0"]),
    ("experts, momentum, decay, clip", ["--experts", "4", "--optimizer", "momentum", "--weight-decay", "0.5",
                                        "--clip", "0.2", "--label-smoothing", "0.1"]),
    ("experts, flash, tied, post-norm", ["--experts", "4", "--attention", "flash", "--tie-embeddings", "--norm",
                                         "post", "--min-len", "2"]),
    ("experts, llama, shared, adam", ["--llama", "--experts", "4", "--shared-experts", "1", "--dec-layers",
                                            "2", "--optimizer", "adam", "--dropout", "0.1"]),
]
STEP_FLAGS = ["--steps", "1", "--batch", "4", "--lr", "0.1", "--eval-every", "1"]
GREEDY_INPUTS = 4  # inputs decoded by both programs for each variant, greedily and with a beam
BEAM = ["--beam", "3", "--length-penalty", "0.6"]


def run_sorter(args, cwd):
    """Run ../sorter; on failure raise with its stderr, which names the problem."""
    done = subprocess.run([str(SORTER), *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{SORTER.name} {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def worst(a, b):
    return float((a - b).abs().max())  # nan when either holds a nan


def largest(values):
    """max() that keeps a nan: Python's max() drops it unless it comes first, and nan must fail."""
    values = list(values)
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def replay_step(dump, after):
    """Redo the dumped step with autograd. Returns the worst |difference| of logits, loss, weights."""
    model = model_from_checkpoint(dump.checkpoint)
    source, target_in, target = (torch.tensor(x) for x in (dump.sources, dump.targets_in, dump.targets))
    header = dump.checkpoint.header
    if (float(header.get("dropout", 0)) > 0 or float(header.get("attn_dropout", 0)) > 0) and not dump.masks:
        raise ValueError("the model has dropout, and the step dump holds no masks to replay")
    model.replay_masks(dump.masks, len(dump.sources), len(dump.sources[0]), len(dump.targets_in[0]))
    logits = model.forward(source, target_in)  # (B, T, V)
    logit_diff = largest(worst(logits[i].detach(), dump.logits[i]) for i in range(len(dump.logits)))
    training = dump.checkpoint.training
    smoothing = float(training.get("label_smoothing", 0))
    task = cross_entropy(logits, target, smoothing)  # the loss training follows, with the experts' balance loss
    loss = task + model.balance_loss()
    plain = task if smoothing == 0 else cross_entropy(logits.detach(), target, 0.0)
    if smoothing > 0 and dump.smoothed_loss is None:
        raise ValueError("the model has label smoothing, and the step dump holds no smoothed_loss")
    loss_diff = max(abs(plain.item() - dump.loss),
                    abs(task.item() - dump.smoothed_loss) if smoothing > 0 else 0.0)
    loss.backward()
    for _, p in model.parameters():  # an expert no row chose took no part: its gradient is zero, as in sorter
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    norm = update(model.parameters(), dump.lr, training)
    clip = float(training.get("clip", 0))
    if clip > 0 and norm <= clip:
        raise ValueError(f"the gradient's norm {norm:.3g} is below --clip {clip:g}: this check would not clip")
    weight_diff = largest(worst(p.detach(), after.tensors[name]) for name, p in model.parameters())
    return logit_diff, loss_diff, weight_diff


def replay_lora(dump, after_adapters, merged=None):
    """Redo a fine-tuning run's dumped steps (chapter 12: the first, then dump.later's) with this file's own adapters:
    every base tensor frozen (requires_grad False), each adapted W read as W + s (x A) B, A and B trained by one
    PyTorch optimizer kept across the steps. Returns the worst |difference| of the first step's logits and loss, and
    of the adapters after the last step (and of the merged model, W + s A B, when `merged` is given)."""
    model = model_from_checkpoint(dump.checkpoint)
    training = dump.checkpoint.training
    header = dump.checkpoint.header
    if any(float(header.get(k, 0)) > 0 for k in ("dropout", "attn_dropout")):
        raise ValueError("the twin replays fine-tuning steps without dropout (the dump has no masks)")
    for _, p in model.parameters():
        p.requires_grad_(False)  # the base is frozen: no gradient, no optimizer state
    places, adapters = linears_of(model), []
    for name, value in dump.adapters.items():
        if name != "scale":
            linear, which = places[name.rsplit(".", 1)[0]], name.rsplit("_", 1)[-1]  # "...W_q.lora_A" -> "A"
            setattr(linear, which, value.clone().requires_grad_(True))
            linear.s = dump.adapters["scale"]
            adapters.append((name, getattr(linear, which)))
    tensors = [p for _, p in adapters]
    kind, decay = training.get("optimizer", "sgd"), float(training.get("weight_decay", 0))  # the base file's decay
    optimizer = choose("optimizer", kind, {  # betas, eps and momentum as update()'s; AdamW's decay is its own
        "sgd": lambda: torch.optim.SGD(tensors, lr=1.0),
        "momentum": lambda: torch.optim.SGD(tensors, lr=1.0, momentum=0.9),
        "adam": lambda: torch.optim.AdamW(tensors, lr=1.0, betas=(0.9, 0.98), eps=1e-9, weight_decay=decay)})()
    clip = float(training.get("clip", 0))
    steps = [(dump.lr, dump.sources, dump.targets_in, dump.targets)] + dump.later
    for k, (lr, *batch) in enumerate(steps):
        source, target_in, target = (torch.tensor(x) for x in batch)
        optimizer.zero_grad(set_to_none=True)
        logits = model.forward(source, target_in)  # (B, T, V)
        loss = cross_entropy(logits, target, float(training.get("label_smoothing", 0))) + model.balance_loss()
        if k == 0:
            logit_diff = largest(worst(logits[i].detach(), dump.logits[i]) for i in range(len(dump.logits)))
            loss_diff = abs(cross_entropy(logits.detach(), target, 0.0).item() - dump.loss)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(tensors, clip)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if kind != "adam" and decay > 0:  # decoupled, as sgd_step writes it: every adapter shrinks
            with torch.no_grad():
                for p in tensors:
                    p.mul_(1.0 - lr * decay)
        optimizer.step()
    weight_diff = largest(worst(p.detach(), after_adapters[name]) for name, p in adapters)
    if merged is not None:  # --save: each adapted W + s A B, the rest the base's
        with torch.no_grad():
            for name, linear in places.items():
                if linear.A is not None:
                    linear.W = linear.W + (linear.A @ linear.B) * linear.s
        weight_diff = largest([weight_diff] + [worst(p, merged.tensors[name]) for name, p in model.parameters()])
    return logit_diff, loss_diff, weight_diff


def random_sources(header, count, seed):
    """A few inputs of the checkpoint's data shape: min_len..seq_len digits in 1..max_digit."""
    rng = random.Random(seed)
    lo, hi, top = int(header["min_len"]), int(header["seq_len"]), int(header["max_digit"])
    return [[rng.randint(1, top) for _ in range(rng.randint(lo, hi))] for _ in range(count)]


def decoding_agreement(after_path, after, cwd):
    """Decode a few inputs here and with `sorter --load AFTER --sort ...`, greedily and with a beam of 3 (every
    hypothesis, in order). Returns (agreeing, total) for each."""
    model = model_from_checkpoint(after)
    seq_len, vocab = int(after.header["seq_len"]), int(after.header["vocab"])
    greedy = beam = 0
    inputs = random_sources(after.header, GREEDY_INPUTS, seed=2024)
    for digits in inputs:
        source = digits + [PAD] * (seq_len - len(digits))
        printed = run_sorter(["--load", str(after_path), "--sort", *map(str, digits)], cwd)
        found = re.search(r"^output \[([^\]]*)\]", printed, re.M)  # "output [1, 1, 3, 5, 9]"
        if found is None:
            raise ValueError(f"no 'output [...]' line in sorter's answer to --sort {digits}")
        ours = [token_label(t, vocab) for t in greedy_decode(model, source, seq_len)]
        greedy += ours == found.group(1).split(", ")
        printed = run_sorter(["--load", str(after_path), *BEAM, "--sort", *map(str, digits)], cwd)
        theirs = [line.split("]")[0][1:].split(", ") for line in re.findall(r"^  (\[[^\]]*\])  ", printed, re.M)]
        ours = [[token_label(t, vocab) for t in tokens] for tokens, _ in beam_search(model, source, seq_len, 3, 0.6)]
        beam += ours == theirs
    return greedy, beam, len(inputs)


def check_variant(flags, workdir):
    dump_path, after_path = Path(workdir) / "step.txt", Path(workdir) / "after.txt"
    run_sorter([*flags, *STEP_FLAGS, "--dump-step", str(dump_path), "--save", str(after_path)], workdir)
    dump = parse_step_dump(dump_path.read_text())
    after = parse_checkpoint(after_path.read_text())
    return (*replay_step(dump, after), *decoding_agreement(after_path, after, workdir))


LORA_VARIANTS = [  # (name, the base's flags, --quantize BITS or None, the fine-tuning's flags)
    ("lora qv, float base", [], None, ["--lora", "2"]),
    ("lora all, float base, alpha 3", [], None, ["--lora", "2", "--lora-on", "all", "--lora-alpha", "3"]),
    ("lora all, float, task reverse", ["--min-len", "2"], None, ["--lora", "4", "--lora-on", "all", "--task",
                                                                 "reverse"]),
    ("lora qv, dec-only, float", ["--arch", "decoder-only", "--min-len", "2"], None, ["--lora", "2"]),
    ("lora all, dec-only swiglu, float", ["--arch", "decoder-only", "--act", "swiglu", "--dec-layers", "2"], None,
     ["--lora", "3", "--lora-on", "all"]),
    ("lora qv, 8-bit base", [], 8, ["--lora", "2"]),
    ("lora all, 8-bit base, alpha 3", [], 8, ["--lora", "2", "--lora-on", "all", "--lora-alpha", "3"]),
    ("lora qv, dec-only, 8-bit", ["--arch", "decoder-only", "--min-len", "2"], 8, ["--lora", "2"]),
    ("lora all, dec-only swiglu, 8-bit", ["--arch", "decoder-only", "--act", "swiglu", "--dec-layers", "2"], 8,
     ["--lora", "3", "--lora-on", "all"]),
    ("lora all, 8-bit, tied, llama", ["--llama", "--tie-embeddings"], 8, ["--lora", "2", "--lora-on", "all"]),
    ("lora all, 4-bit base", ["--enc-layers", "2"], 4, ["--lora", "2", "--lora-on", "all"]),
    ("lora all, experts, shared", ["--experts", "4", "--top-k", "2", "--shared-experts", "1"], None,
     ["--lora", "2", "--lora-on", "all"]),
    ("lora all, experts, swiglu, 8-bit", ["--experts", "3", "--act", "swiglu", "--balance", "0.1"], 8,
     ["--lora", "2", "--lora-on", "all", "--task", "reverse"]),
    ("lora all, its base's decay 0.5", ["--weight-decay", "0.5"], None, ["--lora", "2", "--lora-on", "all"]),
    ("lora qv, momentum, decay 0.5", ["--optimizer", "momentum", "--weight-decay", "0.5"], None, ["--lora", "2"]),
]
LORA_BASE_FLAGS = ["--steps", "20", "--batch", "4", "--optimizer", "adam", "--eval-every", "20"]
LORA_STEP_FLAGS = ["--steps", "3", "--lr", "0.01"]  # three steps of the adapters alone, by the base's optimizer


def check_lora_variant(base_flags, bits, lora_flags, workdir):
    """A base trained LORA_BASE_FLAGS and the variant's (Adam, unless they say; then quantized), fine-tuned three steps
    (the dump holds their batches), then one step more from the adapters it saved (--adapters: logits through trained
    adapters). Worst of both runs."""
    at = Path(workdir)
    base, dump1, dump2, after1, after2, merged = (at / f for f in ("base.txt", "step.txt", "step2.txt",
                                                                   "adapters.txt", "adapters2.txt", "merged.txt"))
    run_sorter([*LORA_BASE_FLAGS, *base_flags, "--save", str(base)], workdir)  # a variant's flag comes last: it wins
    if bits:
        run_sorter(["--load", str(base), "--quantize", str(bits), "--save", str(base)], workdir)
    tune = ["--task"] + [lora_flags[lora_flags.index("--task") + 1]] if "--task" in lora_flags else []
    run_sorter(["--load", str(base), *lora_flags, *LORA_STEP_FLAGS, "--dump-step", str(dump1), "--save-adapters",
                str(after1), "--save", str(merged)], workdir)
    run_sorter(["--load", str(base), *tune, "--adapters", str(after1), "--steps", "1", "--lr", "0.01", "--dump-step",
                str(dump2), "--save-adapters", str(after2)], workdir)
    dump = parse_step_dump(dump1.read_text())
    if len(dump.later) != 2:
        raise ValueError(f"the step dump holds {len(dump.later) + 1} steps, not 3")
    merged_ck = parse_checkpoint(merged.read_text())
    first = replay_lora(dump, parse_adapters(after1.read_text()), None if bits else merged_ck)
    second = replay_lora(parse_step_dump(dump2.read_text()), parse_adapters(after2.read_text()))
    return (*(largest(pair) for pair in zip(first, second)), *decoding_agreement(merged, merged_ck, workdir))


def check():
    if not SORTER.exists():
        print(f"torch_sorter.py --check: {SORTER} not found; run make in {SORTER.parent} first")
        return 1
    print(f"torch_sorter.py --check: one training step of {SORTER.name} ({' '.join(STEP_FLAGS)}) redone with "
          f"PyTorch {torch.__version__} autograd and optimizers, float64")
    print("flash variants against " + ("F.scaled_dot_product_attention" if HAS_SDPA else
          "this file's attention() (this PyTorch has no F.scaled_dot_product_attention; 2.0 on has)"))
    print(f"lora variants (chapter 12): a base ({' '.join(LORA_BASE_FLAGS)}, then the variant's flags; then "
          f"--quantize BITS), its adapters trained {' '.join(LORA_STEP_FLAGS)} by its optimizer (and decay), then one "
          f"step on from those: the twin's own adapters, base frozen")
    print(f"worst |difference| per variant; a variant fails above {TOLERANCE:g} or when an output differs (greedy, "
          f"and beam 3's hypotheses)\n")
    print(f"{'variant':<32} {'logits':>9} {'loss':>9} {'weights':>9}  {'greedy':>6}  {'beam':>4}")
    failed = 0
    for name, flags in VARIANTS:
        with tempfile.TemporaryDirectory(prefix="torch_sorter_") as workdir:
            try:
                logit, loss, weight, greedy, beam, total = check_variant(flags, workdir)
            except (RuntimeError, ValueError) as error:  # sorter failed, or wrote a file we cannot read
                print(f"{name:<32} FAIL: {error}")
                failed += 1
                continue
        ok = all(d <= TOLERANCE for d in (logit, loss, weight)) and greedy == beam == total  # False for nan
        failed += not ok
        print(f"{name:<32} {logit:9.1e} {loss:9.1e} {weight:9.1e}  {f'{greedy}/{total}':>6}  {f'{beam}/{total}':>4}"
              f"{'' if ok else '  FAIL'}")
    for name, base_flags, bits, lora_flags in LORA_VARIANTS:  # chapter 12: three Adam steps of the adapters
        with tempfile.TemporaryDirectory(prefix="torch_sorter_") as workdir:
            try:
                logit, loss, weight, greedy, beam, total = check_lora_variant(base_flags, bits, lora_flags, workdir)
            except (RuntimeError, ValueError) as error:
                print(f"{name:<32} FAIL: {error}")
                failed += 1
                continue
        ok = all(d <= TOLERANCE for d in (logit, loss, weight)) and greedy == beam == total
        failed += not ok
        print(f"{name:<32} {logit:9.1e} {loss:9.1e} {weight:9.1e}  {f'{greedy}/{total}':>6}  {f'{beam}/{total}':>4}"
              f"{'' if ok else '  FAIL'}")
    count = len(VARIANTS) + len(LORA_VARIANTS)
    print(f"\n{count - failed} of {count} variants agree" + (f", {failed} FAILED" if failed else ""))
    return 1 if failed else 0


# =============================================================================================
# --speed: training throughput on random sort batches
# =============================================================================================
def random_sort_batch(batch, seq_len, max_digit):
    """source (B, S) random digits, target (B, T) the same sorted, target_in = START + target[:-1]."""
    source = torch.randint(1, max_digit + 1, (batch, seq_len))
    target = torch.sort(source, dim=1).values
    start = torch.full((batch, 1), max_digit + 1)
    return source, torch.cat([start, target[:, :-1]], dim=1), target


def train_step(model, params, batch, lr):
    zero_grad(params)
    loss = cross_entropy(model.forward(batch[0], batch[1]), batch[2])
    loss.backward()
    sgd_update(params, lr)


def blas_in_use():
    """The BLAS libraries this process has loaded (read from /proc/self/maps), e.g. OpenBLAS, and the kernel
    OpenBLAS runs on this CPU (its choice, or OPENBLAS_CORETYPE's): "... (OpenBLAS kernel SkylakeX)"."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return "unknown"
    paths = sorted({line.split()[-1] for line in maps if "blas" in line.rsplit("/", 1)[-1].lower()})
    for path in paths:
        if "openblas" in path.rsplit("/", 1)[-1].lower():
            try:
                corename = ctypes.CDLL(path).openblas_get_corename
                corename.restype = ctypes.c_char_p
                return ", ".join(paths) + f" (OpenBLAS kernel {corename().decode()})"
            except (OSError, AttributeError):
                pass
    return ", ".join(paths) or "none loaded"


def speed(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    config = ModelConfig(vocab=args.max_digit + 2, max_len=args.seq_len, d_model=args.d_model, n_heads=args.heads,
                         d_ff=args.d_ff, enc_layers=args.enc_layers, dec_layers=args.dec_layers)
    model = Transformer(config)  # built in the default dtype, set from --dtype in main()
    params = model.parameters()

    def step():  # draw, forward, backward, SGD: what sorter's --speed times too
        train_step(model, params, random_sort_batch(args.batch, args.seq_len, args.max_digit), args.lr)

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.1 * args.seconds:  # warm-up
        step()
    steps, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < args.seconds:
        step()
        steps += 1
    rate = steps * args.batch / elapsed
    print(f"torch --speed: {rate:.1f} training examples/s (d_model {args.d_model}, heads {args.heads}, "
          f"d_ff {args.d_ff}, layers {args.enc_layers}+{args.dec_layers}, seq_len {args.seq_len}, "
          f"batch {args.batch}, {args.dtype}, {torch.get_num_threads()} thread(s), {steps} steps in {elapsed:.2f} s; "
          f"BLAS {blas_in_use()})")
    return 0


# =============================================================================================
# main
# =============================================================================================
def parse_args(argv):
    p = argparse.ArgumentParser(description="The PyTorch twin of sorter's Transformer.")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", dest="mode", action="store_const", const="check",
                      help="compare one training step with ../sorter (make reference)")
    mode.add_argument("--speed", dest="mode", action="store_const", const="speed",
                      help="print training examples/s on random sort batches")
    p.add_argument("--d-model", type=int, default=16)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--d-ff", type=int, default=32)
    p.add_argument("--enc-layers", type=int, default=1)
    p.add_argument("--dec-layers", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=5)
    p.add_argument("--max-digit", type=int, default=9)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--seconds", type=float, default=1.0, help="measuring time after a warm-up of a tenth of it")
    p.add_argument("--threads", type=int, default=1, help="--speed: torch.set_num_threads (default 1)")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if torch is None:
        print(f"torch_sorter.py: skipped, 'import torch' failed in {sys.executable}. {HOW_TO_GET_TORCH}")
        return 0
    speed_dtype = choose("dtype", args.dtype, {"float64": torch.float64, "float32": torch.float32})
    run, dtype = choose("mode", args.mode, {
        "check": (check, torch.float64),  # --check is float64 always: it compares with sorter's doubles
        "speed": (lambda: speed(args), speed_dtype)})
    torch.set_default_dtype(dtype)
    return run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
