"""A hand-written decoder forward with a static KV cache (the fast engine's arithmetic), run on the own
weights of a transformers `Qwen3ForCausalLM` or `LlamaForCausalLM` (the Llama family: SmolLM2, Llama 2/3
with default RoPE). The two differ only in Qwen3's per-head RMSNorm of q and k, which Llama lacks. It
departs from the transformers forward for batch-decode speed:
- fused q/k/v projections with the attention scale folded into the q norm (Qwen3) or into the q rows of
  the fused projection (Llama; RoPE is linear, so the scale commutes with it), rebuilt whenever a source
  parameter's storage or version counter changes (writes through `param.data` need `refresh(force=True)`);
  the input RMSNorm's weight folded into that projection's columns;
- q and k head dims stored in RoPE-pair order, (i, i + hd/2) side by side, so the rotation is one complex
  product (q.k, their only use, does not depend on the order);
- a KV cache preallocated for the whole call (K transposed), so a decode step writes one column
  (`envace.engines.kv_cache`);
- grouped-query attention by reshaping the queries, not repeating K/V heads;
- prefill of a right-padded grid of prompts (positions are its columns, one causal attention for all),
  with the last layer's query, attention, MLP and output layer run at each prompt's last token only (its
  keys and values at every position, for the cache);
- a prompt decoded by several rows (a task's K samples) kept once, in a trunk cache: a decode step reads
  its K/V once for the queries of all its rows side by side (`decode_shared`), and each row's own cache
  holds only its generated columns.
In float32 it matches the transformers forward to ~1e-6; in bf16/fp16 sampled log-probs match the
trainer's only to that dtype's precision (~1e-2). Measured on CPU only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from envace.engines.kv_cache import KVCache, TrunkIndex

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
    # every projection as (in, out), read as x @ w (see `as_in_out`)
    wqkv: torch.Tensor  # (hidden, q + k + v out), input norm folded in, q/k head dims in RoPE-pair order
    qk_norm: torch.Tensor | None  # Qwen3: (heads + kv_heads, head_dim) in RoPE-pair order, q rows carry the scale
    wo: torch.Tensor
    ln2: torch.Tensor
    wgate: torch.Tensor
    wup: torch.Tensor
    wdown: torch.Tensor


def as_in_out(weight: torch.Tensor) -> torch.Tensor:
    """A projection's (out, in) weight as (in, out): a contiguous copy on CPU, where a few-row x @ w runs
    2-2.5x faster on it than on the transposed view (MKL sgemm, one thread: SmolLM2's 8-row decode
    matmuls, and 20 % on the tiny model's prefill), at the cost of one copy of the weights; a view
    elsewhere (cuBLAS reads the transpose in place)."""
    w = weight.detach().t()
    return w.contiguous() if w.device.type == "cpu" else w


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
        self._rot: torch.Tensor | None = None

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
        self.embed = src[0].detach()
        self.dtype, self.device = self.embed.dtype, self.embed.device
        scale, half = self.hd ** -0.5, self.hd // 2
        # head dims reordered so each RoPE pair (i, i + hd/2) sits side by side: the rotation is then one
        # complex product; q and k get the same order, so q.k (the only use of either) is unchanged
        pair = torch.arange(self.hd, device=self.device).view(2, half).t().reshape(-1)

        def by_pairs(w: torch.Tensor, heads: int) -> torch.Tensor:
            return w.view(heads, self.hd, *w.shape[1:])[:, pair].reshape(w.shape)

        self.layers = []
        with torch.no_grad():
            self.norm, self.head = src[1].detach(), as_in_out(src[2])
            for layer in m.model.layers:
                a, mlp = layer.self_attn, layer.mlp
                # Qwen3's q norm carries the attention scale; without one, the q rows of the fused projection do
                wq = a.q_proj.weight if self.qk_norm else a.q_proj.weight * scale
                self.layers.append(_Layer(
                    # the input norm's weight folded into the fused projection (a new tensor anyway); the
                    # MLP's and the final norm's multiply x, so off CPU the other weights stay views
                    wqkv=as_in_out(torch.cat([by_pairs(wq, self.h), by_pairs(a.k_proj.weight, self.kvh),
                                              a.v_proj.weight]) * layer.input_layernorm.weight),
                    qk_norm=torch.cat([by_pairs(a.q_norm.weight * scale, 1).expand(self.h, -1),
                                       by_pairs(a.k_norm.weight, 1).expand(self.kvh, -1)]).detach()
                    if self.qk_norm else None,
                    wo=as_in_out(a.o_proj.weight),
                    ln2=layer.post_attention_layernorm.weight.detach(),
                    wgate=as_in_out(mlp.gate_proj.weight), wup=as_in_out(mlp.up_proj.weight),
                    wdown=as_in_out(mlp.down_proj.weight)))
        self._key = key

    def rope_table(self, n_pos: int) -> None:
        """The rotation per position as complex numbers (n_pos, head_dim/2), cos + i sin, from the model's
        own rotary module."""
        if self._rot is not None and self._rot.shape[0] >= n_pos:
            return
        n = max(n_pos, getattr(self.model.config, "max_position_embeddings", 0) or 0)
        pos = torch.arange(n, device=self.device)[None]
        probe = torch.zeros(1, dtype=torch.float32, device=self.device)
        cos, sin = self.model.model.rotary_emb(probe, pos)
        half = self.hd // 2
        self._rot = torch.complex(cos[0, :, :half].float(), sin[0, :, :half].float()).contiguous()

    # ----- shared pieces --------------------------------------------------------------------------

    def _rms(self, x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """RMSNorm over the last dim (fewer passes over x than F.rms_norm's CPU decomposition); the weight,
        where not folded into the next projection, multiplies after."""
        r = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
        r = r.square_().div_(x.shape[-1]).add_(self.eps).rsqrt_().to(x.dtype)
        return x * r if weight is None else torch.mul(x, r).mul_(weight)

    def _qkv(self, layer: _Layer, x: torch.Tensor, rot: torch.Tensor):
        """Normed, rotated q (..., h, hd) and k (..., kvh, hd), and v (..., kvh, hd), for token rows x
        (..., hidden); `rot` (complex) broadcasts against (..., 1, hd/2)."""
        lead, h, kvh, hd = x.shape[:-1], self.h, self.kvh, self.hd
        qkv = self._rms(x) @ layer.wqkv
        qk = self._rotate(qkv[..., :(h + kvh) * hd].view(*lead, h + kvh, hd), layer.qk_norm, rot)
        return qk[..., :h, :], qk[..., h:, :], qkv[..., (h + kvh) * hd:].view(*lead, kvh, hd)

    def _rotate(self, heads: torch.Tensor, norm: torch.Tensor | None, rot: torch.Tensor) -> torch.Tensor:
        """Heads (..., n, hd) normed by the per-head norm `norm` (Qwen3; None: Llama) and rotated by `rot`."""
        lead, n, hd = heads.shape[:-2], heads.shape[-2], self.hd
        if norm is not None:
            heads = self._rms(heads, norm)
        # RoPE on (i, i + hd/2) pairs, stored side by side: (a + ib)(cos + i sin)
        pairs = torch.view_as_complex(heads.float().view(*lead, n, hd // 2, 2))
        return torch.view_as_real(pairs * rot).view(*lead, n, hd).to(heads.dtype)

    def _last_layer_kv(self, layer: _Layer, x: torch.Tensor, rot: torch.Tensor, at: torch.Tensor,
                       last: torch.Tensor):
        """The last prefill layer: k and v (nb, lmax, kvh, hd) at every position (for the cache), q (nb, h, hd)
        only at each prompt's last token `last` (its output is read there alone)."""
        h, kvh, hd = self.h, self.kvh, self.hd
        xn = self._rms(x)
        kv = xn @ layer.wqkv[:, h * hd:]
        norm = layer.qk_norm
        k = self._rotate(kv[..., :kvh * hd].view(*x.shape[:-1], kvh, hd), None if norm is None else norm[h:], rot)
        q = (xn[at, last] @ layer.wqkv[:, :h * hd]).view(-1, h, hd)
        q = self._rotate(q, None if norm is None else norm[:h], self._rot[last][:, None])
        return q, k, kv[..., kvh * hd:].view(*x.shape[:-1], kvh, hd)

    def _mlp(self, layer: _Layer, x: torch.Tensor) -> torch.Tensor:
        xn = self._rms(x, layer.ln2)
        # two matmuls rather than one fused gate/up: silu and the product then run on contiguous tensors
        act = F.silu(xn @ layer.wgate, inplace=True).mul_(xn @ layer.wup)
        return torch.addmm(x, act, layer.wdown)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return (self._rms(x, self.norm) @ self.head).float()

    # ----- prefill --------------------------------------------------------------------------------

    def prefill(self, cache: KVCache, rows: list[int], prompts: list[list[int]], width: int) -> torch.Tensor:
        """Run `prompts` into cache rows `rows` from column 0, the columns up to `width` (where decoding
        starts) after each prompt masked; return the logits (len(prompts), V) at each prompt's last token.

        The prompts run as one right-padded (prompts, longest) grid laid out as in the cache: RoPE positions
        are the grid's columns, one causal attention serves every prompt (pads sit after every real token,
        so no real query sees them; pad queries see finite values and are never read), and each layer's
        K/V go to the cache in one copy (the pads' finite K/V in masked columns)."""
        dev, h, kvh, hd, hidden = self.device, self.h, self.kvh, self.hd, self.hidden
        lens = [len(p) for p in prompts]
        nb, lmax = len(prompts), max(lens)
        ids = torch.tensor([p + [0] * (lmax - len(p)) for p in prompts], dtype=torch.long, device=dev)
        # the cache rows as a slice where they are consecutive (a plain copy), else as an index
        consecutive = rows == list(range(rows[0], rows[0] + nb))
        crow = slice(rows[0], rows[0] + nb) if consecutive else torch.tensor(rows, device=dev)
        n_tok = torch.tensor(lens, device=dev)
        cols = torch.arange(width, device=dev)
        pad_bias = torch.where(cols >= n_tok[:, None], float("-inf"), 0.0).to(self.dtype)
        cache.bias[crow, :, :, :width] = pad_bias[:, None, None]
        rot = self._rot[:lmax, None]  # (lmax, 1, hd/2), the same for every prompt
        x = self.embed[ids]  # (nb, lmax, hidden)
        at, last = torch.arange(nb, device=dev), n_tok - 1
        for li, layer in enumerate(self.layers):
            final = li == len(self.layers) - 1
            # (nb, lmax, heads, hd); the last layer's q at each prompt's last token only, (nb, h, hd)
            q, k, v = self._last_layer_kv(layer, x, rot, at, last) if final else self._qkv(layer, x, rot)
            cache.k[li].view(cache.rows, kvh, hd, -1)[crow, :, :, :lmax] = k.permute(0, 2, 3, 1)
            cache.v[li].view(cache.rows, kvh, -1, hd)[crow, :, :lmax] = v.transpose(1, 2)
            keys, values = k.transpose(1, 2), v.transpose(1, 2)
            if final:
                # the last layer's output is read only at each prompt's last token: its q, attention, o_proj
                # and the MLP run there alone (its K/V above were still needed for the cache)
                seen = (cols[:lmax] < n_tok[:, None])[:, None, None, :]
                o = F.scaled_dot_product_attention(q[:, :, None], keys, values, attn_mask=seen,
                                                   scale=1.0, enable_gqa=True)
                return self.logits(self._mlp(layer, torch.addmm(x[at, last], o.reshape(nb, h * hd), layer.wo)))
            o = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, is_causal=True, scale=1.0,
                                               enable_gqa=True)
            x = torch.addmm(x.view(-1, hidden), o.transpose(1, 2).reshape(-1, h * hd), layer.wo)
            x = self._mlp(layer, x).view(nb, lmax, hidden)
        raise AssertionError("unreachable: the last layer returns")

    # ----- decode ---------------------------------------------------------------------------------

    def decode(self, cache: KVCache, tokens: torch.Tensor, pos: torch.Tensor, col: int) -> torch.Tensor:
        """One token per cache row: `tokens` (rows,) at RoPE positions `pos`, written at cache column
        `col`; attention over columns 0..col. Returns logits (rows, V)."""
        b, h, kvh, hd = tokens.shape[0], self.h, self.kvh, self.hd
        g = h // kvh
        bias = cache.bias[..., :col + 1]

        def attend(li: int, q: torch.Tensor) -> torch.Tensor:
            # queries of one kv head side by side: (rows*kvh, group, hd) against that head's K/V
            scores = torch.bmm(q.reshape(b * kvh, g, hd), cache.k[li][:, :, :col + 1])
            probs = scores.view(b, kvh, g, col + 1).add_(bias).softmax(dim=-1)
            return torch.bmm(probs.view(b * kvh, g, col + 1), cache.v[li][:, :col + 1]).view(b, h * hd)

        return self._decode_layers(cache, tokens, pos, col, attend)

    def decode_shared(self, trunk: KVCache, cache: KVCache, index: TrunkIndex, tokens: torch.Tensor,
                      pos: torch.Tensor, col: int) -> torch.Tensor:
        """`decode` for rows that share prompts: row r attends to its prompt's K/V in `trunk` (row
        index.group[r], pad columns masked by the trunk's bias) and to its own generated columns 0..col of
        `cache`, one softmax over both. A prompt's K/V are read once per step for all its rows: their
        queries sit side by side (index.slot) in one matmul against that trunk row. Returns logits (rows, V)."""
        b, h, kvh, hd = tokens.shape[0], self.h, self.kvh, self.hd
        g, u, n = h // kvh, index.n_groups, index.slots
        tw = trunk.k[0].shape[-1]
        grp, slot = index.group, index.slot
        trunk_bias = trunk.bias[grp]  # (rows, 1, 1, tw)
        # queries (and probabilities) of one trunk row's rows side by side, (trunk rows * kvh, slots * group, .)
        if index.regular:  # rows in trunk-row order, every slot held: the layout is a permutation of the rows'
            def to_blocks(x: torch.Tensor, _buf: int) -> torch.Tensor:  # (rows, kvh, g, w) -> (u * kvh, n * g, w)
                return x.view(u, n, kvh, g, -1).transpose(1, 2).reshape(u * kvh, n * g, x.shape[-1])

            def from_blocks(x: torch.Tensor) -> torch.Tensor:  # the inverse
                return x.view(u, kvh, n, g, -1).transpose(1, 2).reshape(b, kvh, g, x.shape[-1])
        else:  # written slot by slot; every layer writes the same slots, so a slot no row holds stays zero
            bufs = (torch.zeros(u, kvh, n, g, hd, dtype=self.dtype, device=self.device),
                    torch.zeros(u, kvh, n, g, tw, dtype=self.dtype, device=self.device))

            def to_blocks(x: torch.Tensor, buf: int) -> torch.Tensor:
                bufs[buf][grp, :, slot] = x
                return bufs[buf].view(u * kvh, n * g, -1)

            def from_blocks(x: torch.Tensor) -> torch.Tensor:
                return x.view(u, kvh, n, g, -1)[grp, :, slot]

        def attend(li: int, q: torch.Tensor) -> torch.Tensor:
            st = from_blocks(torch.bmm(to_blocks(q.view(b, kvh, g, hd), 0), trunk.k[li]))
            own = torch.bmm(q.reshape(b * kvh, g, hd), cache.k[li][:, :, :col + 1]).view(b, kvh, g, col + 1)
            probs = torch.cat([st.add_(trunk_bias), own], dim=-1).softmax(dim=-1)
            o = from_blocks(torch.bmm(to_blocks(probs[..., :tw], 1), trunk.v[li]))
            return o.reshape(b, h * hd).add_(torch.bmm(probs[..., tw:].reshape(b * kvh, g, col + 1),
                                                       cache.v[li][:, :col + 1]).view(b, h * hd))

        return self._decode_layers(cache, tokens, pos, col, attend)

    def _decode_layers(self, cache: KVCache, tokens: torch.Tensor, pos: torch.Tensor, col: int,
                       attend) -> torch.Tensor:
        """One decode step through every layer: q/k/v of each row's token, its K/V written at cache column
        `col`, `attend(layer index, q)` -> the attention output (rows, heads * hd), o_proj and the MLP;
        returns logits (rows, V)."""
        b, kvh, hd = tokens.shape[0], self.kvh, self.hd
        rot = self._rot[pos][:, None]
        x = self.embed[tokens]
        for li, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, rot)
            cache.k[li][:, :, col] = k.reshape(b * kvh, hd)
            cache.v[li][:, col] = v.reshape(b * kvh, hd)
            x = torch.addmm(x, attend(li, q), layer.wo)
            x = self._mlp(layer, x)
        return self.logits(x)
