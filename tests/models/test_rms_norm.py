"""envace.models.rms_norm: the hand-written backward is the derivative of transformers' RMSNorm (float64
gradcheck, and float32 against autograd through transformers' own module), the forward is transformers' bit
for bit, and a CPU model with its norms swapped trains and saves as one with transformers' norms."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from envace.models.loading import load_policy
from envace.models.rms_norm import FusedRMSNorm, RMSNormFunction, use_fused_rms_norm


def _norm_by_hand(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The definition, written independently: each row over its root mean square, times the weight."""
    rows = x.reshape(-1, x.shape[-1])
    out = torch.stack([w * r / torch.sqrt((r * r).sum() / r.numel() + eps) for r in rows])
    return out.reshape(x.shape)


@pytest.mark.parametrize("shape", [(3, 8), (2, 3, 5, 8)])
def test_backward_is_the_derivative_float64(shape):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, dtype=torch.float64, generator=gen, requires_grad=True)
    w = (torch.randn(shape[-1], dtype=torch.float64, generator=gen) + 1).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: RMSNormFunction.apply(a, b, 1e-6), (x, w))
    g = torch.randn(*shape, dtype=torch.float64, generator=gen)
    got = torch.autograd.grad((RMSNormFunction.apply(x, w, 1e-6) * g).sum(), (x, w))
    want = torch.autograd.grad((_norm_by_hand(x, w, 1e-6) * g).sum(), (x, w))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls", [Qwen3RMSNorm, LlamaRMSNorm])
@pytest.mark.parametrize("shape", [(64, 128), (4, 16, 2, 32)])
def test_forward_bit_for_bit_and_gradients_as_transformers(cls, shape):
    gen = torch.Generator().manual_seed(1)
    theirs = cls(shape[-1], eps=1e-6)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(shape[-1], generator=gen) * 0.2 + 1)
    ours = FusedRMSNorm(theirs.weight, 1e-6)
    x = torch.randn(*shape, generator=gen, requires_grad=True)
    g = torch.randn(*shape, generator=gen)
    y_theirs, y_ours = theirs(x), ours(x)
    assert torch.equal(y_theirs, y_ours)
    with torch.no_grad():
        assert torch.equal(ours(x), y_theirs)  # the inference path too
    grads_theirs = torch.autograd.grad((y_theirs * g).sum(), (x, theirs.weight))
    grads_ours = torch.autograd.grad((y_ours * g).sum(), (x, ours.weight))
    for a, b in zip(grads_ours, grads_theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_other_dtypes_run_transformers_ops():
    """A model cast to float64 after loading: the norm computes in float32 and casts back, as transformers'."""
    theirs = Qwen3RMSNorm(8).double()
    ours = FusedRMSNorm(theirs.weight, 1e-6)
    x = torch.randn(3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert torch.equal(ours(x), theirs(x)) and ours(x).dtype == torch.float64


def test_swapped_model_trains_and_saves_as_transformers(tiny_dir, tmp_path):
    model, _ = load_policy(tiny_dir, device="cpu")
    assert use_fused_rms_norm(model) == 4 * model.config.num_hidden_layers + 1
    reference = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    layers = model.config.num_hidden_layers
    norms = [m for m in model.modules() if isinstance(m, FusedRMSNorm)]
    assert len(norms) == 4 * layers + 1  # input, after attention, q and k per layer; the final norm
    assert not any(isinstance(m, Qwen3RMSNorm) for m in model.modules())
    assert list(model.state_dict()) == list(reference.state_dict())
    ids = torch.randint(5, model.config.vocab_size, (3, 17), generator=torch.Generator().manual_seed(2))
    outs = []
    for m in (model, reference):
        m.zero_grad(set_to_none=True)
        logits = m(input_ids=ids).logits
        torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).backward()
        outs.append((logits.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}))
    assert torch.equal(outs[0][0], outs[1][0])
    for name, grad in outs[1][1].items():
        torch.testing.assert_close(outs[0][1][name], grad, rtol=1e-4, atol=1e-6, msg=name)
    copied = copy.deepcopy(model)  # the copy's norms hold the copy's weights
    assert copied.model.norm.weight is copied.get_parameter("model.norm.weight")
    assert copied.model.norm.weight is not model.model.norm.weight
    pickle.loads(pickle.dumps(model.model.norm))
    model.save_pretrained(tmp_path / "saved")
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    assert isinstance(again.model.norm, Qwen3RMSNorm)
    for name, value in reference.state_dict().items():
        assert torch.equal(again.state_dict()[name], value), name


def test_other_models_left_as_they_are(tiny_dir):
    half = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.bfloat16)
    assert use_fused_rms_norm(half) == 0
    assert isinstance(half.model.norm, Qwen3RMSNorm)

    class OtherNorm(torch.nn.Module):  # a norm of another formula keeps its own module
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(4))
            self.variance_epsilon = 1e-6

    holder = torch.nn.Sequential(OtherNorm())
    assert use_fused_rms_norm(holder) == 0
