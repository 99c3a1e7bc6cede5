"""A hand-written decoder forward with a static KV cache (the fast engine's arithmetic), run on the own
weights of a transformers `Qwen3ForCausalLM` or `LlamaForCausalLM` (the Llama family: SmolLM2, Llama 2/3
with default RoPE). The two differ only in Qwen3's per-head RMSNorm of q and k, which Llama lacks. It
departs from the transformers forward for batch-decode speed:
- fused q/k/v projections with the attention scale folded into the q norm (Qwen3) or into the q rows of
  the fused projection (Llama; RoPE is linear, so the scale commutes with it), rebuilt whenever a source
  parameter's storage or version counter changes (writes through `param.data` need `refresh(force=True)`);
- a KV cache preallocated for the whole call (K transposed), so a decode step writes one column;
- grouped-query attention by reshaping the queries, not repeating K/V heads;
- packed prefill, with the last layer's attention output, MLP and output layer run at each prompt's last
  token only.
In float32 it matches the transformers forward to ~1e-6; in bf16/fp16 sampled log-probs match the
trainer's only to that dtype's precision (~1e-2). Measured on CPU only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

ARCHITECTURES = ("qwen3", "llama")  # config.model_type values the kernel runs


def unsupported_reason(model: Any) -> str | None:
    """Why the fast forward cannot run `model` (None when it can)."""
    cfg = getattr(model, "config", None)
    arch = getattr(cfg, "model_type", None)
    if arch not in ARCHITECTURES:
        return f"architecture {arch!r} is not one of {', '.join(ARCHITECTURES)}"
    if getattr(cfg, "attention_bias", False):
        return "attention projections have biases"
    if getattr(cfg, "mlp_bias", False):
        return "MLP projections have biases"
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return f"pretraining_tp={cfg.pretraining_tp} (sliced projections) is not 1"
    layer_types = getattr(cfg, "layer_types", None) or []
    if getattr(cfg, "use_sliding_window", False) or any(t != "full_attention" for t in layer_types):
        return "sliding-window attention layers"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r} is not silu"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return f"rope type {rope.get('rope_type')!r} is not 'default'"
    if not hasattr(getattr(model, "model", None), "layers") or not hasattr(model, "lm_head"):
        return f"model does not have the {type(model).__name__} decoder layout (model.layers, lm_head)"
    attn = getattr(model.model.layers[0], "self_attn", None) if len(model.model.layers) else None
    if attn is None or not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
        return "attention layers lack separate q/k/v/o projections"
    if (arch == "qwen3") != hasattr(attn, "q_norm"):
        return f"{arch} attention {'without' if arch == 'qwen3' else 'with'} q/k norms"
    device = next(model.parameters()).device
    if device.type not in ("cpu", "cuda"):
        return f"device {device.type!r} is not cpu or cuda"
    return None


@dataclass
class _Layer:
    ln1: torch.Tensor
    wqkv: torch.Tensor  # (q + k + v out, hidden)
    qk_norm: torch.Tensor | None  # Qwen3: (heads + kv_heads, head_dim), the q rows carry the attention scale
    wo_t: torch.Tensor  # (heads*head_dim, hidden) view of o_proj.weight.T
    ln2: torch.Tensor
    wgate: torch.Tensor
    wup: torch.Tensor
    wdown_t: torch.Tensor


class KVCache:
    """Static per-call cache: K transposed (rows*kvh, hd, T), V (rows*kvh, T, hd), and a mask bias per row."""

    def __init__(self, n_layers: int, rows: int, kvh: int, hd: int, width: int, dtype, device) -> None:
        self.rows, self.kvh = rows, kvh
        self.k = [torch.zeros(rows * kvh, hd, width, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(rows * kvh, width, hd, dtype=dtype, device=device) for _ in range(n_layers)]
        self.bias = torch.zeros(rows, 1, 1, width, dtype=dtype, device=device)

    def copy_rows(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Row dst[i] becomes a copy of row src[i] (keys, values and mask bias)."""
        kvh = self.kvh
        for k, v in zip(self.k, self.v):
            kr, vr = k.view(self.rows, kvh, *k.shape[1:]), v.view(self.rows, kvh, *v.shape[1:])
            kr[dst] = kr[src]
            vr[dst] = vr[src]
        self.bias[dst] = self.bias[src]

    def keep(self, sel: torch.Tensor) -> None:
        """Drop the rows not in `sel` (a copy of the live rows, done rarely: see the engine)."""
        kvh = self.kvh
        self.k = [k.view(self.rows, kvh, *k.shape[1:]).index_select(0, sel).view(-1, *k.shape[1:]) for k in self.k]
        self.v = [v.view(self.rows, kvh, *v.shape[1:]).index_select(0, sel).view(-1, *v.shape[1:]) for v in self.v]
        self.bias = self.bias.index_select(0, sel)
        self.rows = int(sel.numel())


class DecoderKernel:
    """Prefill and decode steps for one Qwen3ForCausalLM or LlamaForCausalLM (see module docstring)."""

    def __init__(self, model: Any) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"the fast engine cannot run this model: {reason}; use HFEngine")
        cfg = model.config
        self.model = model
        self.h, self.kvh = cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.h
        self.hidden, self.eps = cfg.hidden_size, cfg.rms_norm_eps
        self.n_layers = cfg.num_hidden_layers
        self.qk_norm = cfg.model_type == "qwen3"
        self._key: tuple | None = None
        self._cos = self._sin = None

    # ----- weights --------------------------------------------------------------------------------

    def _sources(self) -> list[torch.Tensor]:
        m = self.model
        out = [m.model.embed_tokens.weight, m.model.norm.weight, m.lm_head.weight]
        for layer in m.model.layers:
            a, mlp = layer.self_attn, layer.mlp
            out += [layer.input_layernorm.weight, a.q_proj.weight, a.k_proj.weight, a.v_proj.weight,
                    *((a.q_norm.weight, a.k_norm.weight) if self.qk_norm else ()), a.o_proj.weight,
                    layer.post_attention_layernorm.weight, mlp.gate_proj.weight, mlp.up_proj.weight,
                    mlp.down_proj.weight]
        return out

    def refresh(self, force: bool = False) -> None:
        """Rebuild the fused weights if any source parameter changed since the last build."""
        src = self._sources()
        key = tuple((p.data_ptr(), p._version) for p in src)
        if key == self._key and not force:
            return
        m = self.model
        self.embed, self.norm, self.lm_head = src[0].detach(), src[1].detach(), src[2].detach()
        self.dtype, self.device = self.embed.dtype, self.embed.device
        scale = self.hd ** -0.5
        self.layers = []
        with torch.no_grad():
            for layer in m.model.layers:
                a, mlp = layer.self_attn, layer.mlp
                # Qwen3's q norm carries the attention scale; without one, the q rows of the fused projection do
                wq = a.q_proj.weight if self.qk_norm else a.q_proj.weight * scale
                self.layers.append(_Layer(
                    ln1=layer.input_layernorm.weight.detach(),
                    wqkv=torch.cat([wq, a.k_proj.weight, a.v_proj.weight]).detach(),
                    qk_norm=torch.cat([(a.q_norm.weight * scale).expand(self.h, -1),
                                       a.k_norm.weight.expand(self.kvh, -1)]).detach() if self.qk_norm else None,
                    wo_t=a.o_proj.weight.detach().t(),
                    ln2=layer.post_attention_layernorm.weight.detach(),
                    wgate=mlp.gate_proj.weight.detach(), wup=mlp.up_proj.weight.detach(),
                    wdown_t=mlp.down_proj.weight.detach().t()))
        self._key = key

    def rope_table(self, n_pos: int) -> None:
        """cos and sin (n_pos, head_dim) from the model's own rotary module; sin carries rotate_half's sign."""
        if self._cos is not None and self._cos.shape[0] >= n_pos:
            return
        n = max(n_pos, getattr(self.model.config, "max_position_embeddings", 0) or 0)
        pos = torch.arange(n, device=self.device)[None]
        probe = torch.zeros(1, dtype=self.dtype, device=self.device)
        cos, sin = self.model.model.rotary_emb(probe, pos)
        half = self.hd // 2
        self._cos = cos[0].contiguous()
        self._sin = torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1).contiguous()

    # ----- shared pieces --------------------------------------------------------------------------

    def _rms(self, x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """RMSNorm over the last dim (fewer passes over x than F.rms_norm's CPU decomposition)."""
        r = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
        r = r.square_().div_(x.shape[-1]).add_(self.eps).rsqrt_().to(x.dtype)
        return x * r if weight is None else torch.mul(x, r).mul_(weight)

    def _qkv(self, layer: _Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Normed, rotated q (n, h, hd) and k (n, kvh, hd), and v (n, kvh, hd), for n token rows."""
        n, h, kvh, hd = x.shape[0], self.h, self.kvh, self.hd
        qkv = F.linear(self._rms(x, layer.ln1), layer.wqkv)
        qk = qkv[:, :(h + kvh) * hd].view(n, h + kvh, hd)
        if layer.qk_norm is not None:
            qk = self._rms(qk, layer.qk_norm)
        # RoPE: x*cos + rotate_half(x)*sin, with rotate_half(x)*sin = roll(x, hd/2) * (sign-carrying sin)
        qk = torch.addcmul(qk * cos, qk.roll(hd // 2, dims=-1), sin)
        return qk[:, :h], qk[:, h:], qkv[:, (h + kvh) * hd:].view(n, kvh, hd)

    def _mlp(self, layer: _Layer, x: torch.Tensor) -> torch.Tensor:
        xn = self._rms(x, layer.ln2)
        # two matmuls rather than one fused gate/up: silu and the product then run on contiguous tensors
        act = F.silu(F.linear(xn, layer.wgate), inplace=True).mul_(F.linear(xn, layer.wup))
        return torch.addmm(x, act, layer.wdown_t)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self._rms(x, self.norm), self.lm_head).float()

    # ----- prefill --------------------------------------------------------------------------------

    def prefill(self, cache: KVCache, rows: list[int], prompts: list[list[int]], width: int) -> torch.Tensor:
        """Run `prompts` (packed) into cache rows `rows`, right-aligned at column `width`; return the
        logits (len(prompts), V) at each prompt's last token."""
        dev, h, kvh, hd = self.device, self.h, self.kvh, self.hd
        lens = [len(p) for p in prompts]
        nb, lmax = len(prompts), max(lens)
        n_tok = torch.tensor(lens, device=dev)
        ids = torch.tensor([t for p in prompts for t in p], dtype=torch.long, device=dev)
        starts = torch.cumsum(n_tok, 0) - n_tok
        pos = torch.arange(ids.shape[0], device=dev) - starts.repeat_interleave(n_tok)
        # each packed token's place in a right-padded (prompt, lmax) grid and in the cache (row, column)
        grid = pos + (torch.arange(nb, device=dev) * lmax).repeat_interleave(n_tok)
        crow = torch.tensor(rows, device=dev).repeat_interleave(n_tok)
        ccol = pos + (width - n_tok).repeat_interleave(n_tok)
        for r, n in zip(rows, lens):
            cache.bias[r, ..., :width - n] = float("-inf")
        cos, sin = self._cos[pos][:, None], self._sin[pos][:, None]
        x = self.embed[ids]
        pad_q = torch.zeros(nb * lmax, h, hd, dtype=self.dtype, device=dev)
        pad_kv = torch.zeros(2, nb * lmax, kvh, hd, dtype=self.dtype, device=dev)
        last = starts + n_tok - 1
        for li, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, cos, sin)
            cache.k[li].view(cache.rows, kvh, hd, -1)[crow, :, :, ccol] = k
            cache.v[li].view(cache.rows, kvh, -1, hd)[crow, :, ccol, :] = v
            pad_kv[0, grid], pad_kv[1, grid] = k, v
            keys = pad_kv[0].view(nb, lmax, kvh, hd).transpose(1, 2)
            values = pad_kv[1].view(nb, lmax, kvh, hd).transpose(1, 2)
            if li == len(self.layers) - 1:
                # the last layer's output is read only at each prompt's last token: attention, o_proj and
                # the MLP run there alone (its K/V above were still needed for the cache)
                seen = (torch.arange(lmax, device=dev) < n_tok[:, None])[:, None, None, :]
                o = F.scaled_dot_product_attention(q[last][:, :, None], keys, values, attn_mask=seen,
                                                   scale=1.0, enable_gqa=True)
                return self.logits(self._mlp(layer, torch.addmm(x[last], o.reshape(nb, h * hd), layer.wo_t)))
            # one causal attention over the right-padded prompts: pads sit after every real token, so
            # no real query sees them (pad queries see zeros and are never read)
            pad_q[grid] = q
            o = F.scaled_dot_product_attention(pad_q.view(nb, lmax, h, hd).transpose(1, 2), keys, values,
                                               is_causal=True, scale=1.0, enable_gqa=True)
            attn = o.transpose(1, 2).reshape(nb * lmax, h * hd)[grid]
            x = torch.addmm(x, attn, layer.wo_t)
            x = self._mlp(layer, x)
        raise AssertionError("unreachable: the last layer returns")

    # ----- decode ---------------------------------------------------------------------------------

    def decode(self, cache: KVCache, tokens: torch.Tensor, pos: torch.Tensor, col: int) -> torch.Tensor:
        """One token per cache row: `tokens` (rows,) at RoPE positions `pos`, written at cache column
        `col`; attention over columns 0..col. Returns logits (rows, V)."""
        b, h, kvh, hd = tokens.shape[0], self.h, self.kvh, self.hd
        g = h // kvh
        cos, sin = self._cos[pos][:, None], self._sin[pos][:, None]
        bias = cache.bias[..., :col + 1]
        x = self.embed[tokens]
        for li, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, cos, sin)
            kc, vc = cache.k[li], cache.v[li]
            kc[:, :, col] = k.reshape(b * kvh, hd)
            vc[:, col] = v.reshape(b * kvh, hd)
            # queries of one kv head side by side: (rows*kvh, group, hd) against that head's K/V
            scores = torch.bmm(q.reshape(b * kvh, g, hd), kc[:, :, :col + 1])
            probs = scores.view(b, kvh, g, col + 1).add_(bias).softmax(dim=-1)
            o = torch.bmm(probs.view(b * kvh, g, col + 1), vc[:, :col + 1])
            x = torch.addmm(x, o.view(b, h * hd), layer.wo_t)
            x = self._mlp(layer, x)
        return self.logits(x)
