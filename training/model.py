"""A Qwen3 decoder in plain torch, written from Hugging Face's Qwen3 math.

Per layer:  h = x + o_proj(attn(rope(q_norm(q)), rope(k_norm(k)), v))   (input_layernorm first)
            x = h + down_proj(silu(gate_proj(n)) * up_proj(n)),  n = post_attention_layernorm(h)
RMSNorm computes in fp32: x * rsqrt(mean(x^2) + eps) * weight. q_norm/k_norm are RMSNorms
over head_dim applied per head before RoPE. RoPE is the rotate-half (NeoX) form over the full
head_dim. Grouped-query attention: each kv head serves heads / kv_heads query heads.
No biases; the LM head is the embedding matrix (tied). Parameter names are HF's, minus the
leading "model." (see hf_state_dict).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Config:
    vocab_size: int = 4096
    hidden_size: int = 256
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    max_position_embeddings: int = 2048


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):  # x: [..., dim]
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_cos_sin(cfg, positions):
    """positions: [B, T] -> cos, sin: [B, 1, T, head_dim] (each frequency twice: the
    rotate-half layout; the 1 broadcasts over heads)."""
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
    freqs = positions.float()[..., None] * inv_freq  # [B, T, head_dim / 2]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # [B, 1, T, head_dim]
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask):  # x: [B, T, hidden]; cos/sin: [B, 1, T, D]; mask: [T, T] bool
        B, T, _ = x.shape
        H, KV, D = self.cfg.num_attention_heads, self.cfg.num_key_value_heads, self.cfg.head_dim
        q = self.q_norm(self.q_proj(x).view(B, T, H, D)).transpose(1, 2)   # [B, H, T, D]
        k = self.k_norm(self.k_proj(x).view(B, T, KV, D)).transpose(1, 2)  # [B, KV, T, D]
        v = self.v_proj(x).view(B, T, KV, D).transpose(1, 2)               # [B, KV, T, D]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)                             # [B, H, T, D]
        v = v.repeat_interleave(H // KV, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)                   # [B, H, T, T]
        scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v         # [B, H, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(B, T, H * D))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def init_weights(self, std=0.02):
        """Normal(0, std) everywhere; the two projections into the residual stream scaled
        down by sqrt(2 * layers) (GPT-2's rule); norms start at 1."""
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, std=std / math.sqrt(2 * self.cfg.num_hidden_layers))
            else:
                nn.init.normal_(p, std=std)

    def forward(self, ids, positions=None):
        """ids: [B, T] int64; positions: [B, T] (default 0..T-1) -> logits [B, T, vocab] fp32."""
        B, T = ids.shape
        if positions is None:
            positions = torch.arange(T).expand(B, T)
        cos, sin = rope_cos_sin(self.cfg, positions)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x) @ self.embed_tokens.weight.t()

    def hf_state_dict(self):
        """-> {HF tensor name: tensor}; the tied LM head is not written (as Qwen3-0.6B)."""
        return {"model." + k: v for k, v in self.state_dict().items()}
