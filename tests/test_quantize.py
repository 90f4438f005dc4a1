"""Int8 and int4 draft weights for CPU decoding (decode/drafts/quantize.py): close to the float layer, target output
unchanged."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from torch import nn

from conftest import make_model
from decode.core.speculative import NoProposer, SamplingParams, generate
from decode.drafts.quantize import Int4Linear, Int8Linear, plan_quant, quantize_draft, quantize_groups, quantize_rows
from decode.proposers.draft_model import DraftModelProposer

V = 300


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.floats(1e-3, 10.0), st.integers(0, 10_000))
def test_rows_round_to_within_half_a_step(n, k, spread, seed):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * spread
    w[0] = 0.0  # an all-zero row must not divide by zero
    q, scale = quantize_rows(w)
    assert q.dtype == torch.int8 and q.abs().max() <= 127 and scale.shape == (n,)
    assert torch.all((q.float() * scale[:, None] - w).abs() <= scale[:, None] / 2 + 1e-6)
    assert torch.all(q[1:].abs().amax(1) == 127)  # each non-zero row uses the full range


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.sampled_from([16, 32, 64]), st.integers(1, 48),
       st.booleans(), st.integers(0, 10_000))
def test_int8_linear_matches_the_float_layer(lead, k, n, bias, seed):
    torch.manual_seed(seed)
    layer = nn.Linear(k, n, bias=bias)
    x = torch.randn(*lead, k)
    out = Int8Linear(layer)(x)
    assert out.shape == (*lead, n) and out.dtype == x.dtype
    ref = F.linear(x, layer.weight, layer.bias)
    # each weight is off by at most scale / 2; bfloat16 rounds the input, the scale and the output (2^-8 each)
    _, scale = quantize_rows(layer.weight)
    bound = x.abs() @ (scale / 2).expand(k, n) + 4 * 2 ** -8 * (x.abs() @ layer.weight.abs().T)
    assert torch.all((out - ref).abs() <= bound + 1e-6)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 20), st.sampled_from([32, 64, 128]), st.integers(1, 3), st.floats(1e-3, 10.0),
       st.integers(0, 10_000))
def test_groups_round_to_within_half_a_step(n, group, groups, spread, seed):
    w = torch.randn(n, group * groups, generator=torch.Generator().manual_seed(seed)) * spread
    w[0, :group] = 1.5  # a constant group must not divide by zero
    q, scale, zero = quantize_groups(w, group)
    assert q.dtype == torch.int32 and q.min() >= 0 and q.max() <= 15 and scale.shape == zero.shape == (n, groups)
    back = ((q.reshape(n, groups, group).float() - 8) * scale[..., None] + zero[..., None]).reshape(w.shape)
    assert torch.all((back - w).abs() <= scale.repeat_interleave(group, dim=1) / 2 + 1e-5)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.sampled_from([32, 64, 96]), st.integers(1, 40),
       st.booleans(), st.integers(0, 10_000))
def test_int4_linear_matches_its_dequantized_weights(lead, k, n, bias, seed):
    torch.manual_seed(seed)
    layer = nn.Linear(k, n, bias=bias)  # n need not be a multiple of the kernel's 16 rows: padded, then dropped
    x = torch.randn(*lead, k)
    out = Int4Linear(layer, 32)(x)
    assert out.shape == (*lead, n) and out.dtype == x.dtype
    q, scale, zero = quantize_groups(layer.weight, 32)
    back = ((q.reshape(n, -1, 32).float() - 8) * scale[..., None] + zero[..., None]).reshape(n, k)
    ref = F.linear(x, back, layer.bias)
    # bfloat16 rounds the input, the scales and offsets and the output (2^-8 each)
    bound = 4 * 2 ** -8 * (x.abs() @ (back.abs() + scale.repeat_interleave(32, dim=1) * 8).T) + 1e-5
    assert torch.all((out - ref).abs() <= bound)


def test_int4_draft_keeps_greedy_output_identical_and_skips_layers_no_group_divides():
    target = make_model(V, layers=3, hidden=32, seed=1, init=0.3)
    draft = make_model(V, layers=1, hidden=32, seed=2, init=0.3)
    draft.extra = nn.Linear(33, 16)  # no group size divides 33: stays float
    fast, plan = quantize_draft(draft, "int4", copy=True)
    assert plan == {"mode": "int4", "quantized": True}
    assert isinstance(fast.lm_head, Int4Linear) and type(fast.extra) is nn.Linear
    assert type(draft.lm_head) is nn.Linear  # the original untouched
    prompt = [7, 11, 13, 40, 90]
    reference = generate(target, NoProposer(), prompt, 0, 24).tokens
    for gamma in (1, 3):
        assert generate(target, DraftModelProposer(fast), prompt, gamma, 24).tokens == reference
    ids = torch.randint(0, V, (4, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref, out = draft(ids).logits, fast(ids).logits
    # a random 32-wide model has small margins and 4 bits round coarsely: well above chance (1/300), far from exact
    assert (out.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.5


def test_int8_draft_keeps_greedy_output_identical_and_the_original_untouched():
    target = make_model(V, layers=3, hidden=32, seed=1, init=0.3)
    draft = make_model(V, layers=1, hidden=32, seed=2, init=0.3)
    prompt = [7, 11, 13, 40, 90]
    before = {k: v.clone() for k, v in draft.state_dict().items()}
    fast, plan = quantize_draft(draft, "int8", copy=True)
    assert plan["quantized"] and fast is not draft
    assert not [m for m in fast.modules() if type(m) is nn.Linear]
    assert isinstance(fast.lm_head, Int8Linear)
    assert all(torch.equal(v, draft.state_dict()[k]) for k, v in before.items())  # the trained weights are kept
    reference = generate(target, NoProposer(), prompt, 0, 24).tokens
    for gamma in (1, 2, 4):
        assert generate(target, DraftModelProposer(fast), prompt, gamma, 24).tokens == reference
    # and it predicts (nearly always) what the float draft predicts
    ids = torch.randint(0, V, (4, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref, out = draft(ids).logits, fast(ids).logits
    assert (out - ref).abs().max() <= 0.05 * ref.abs().max()
    assert (out.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9


def test_int8_draft_sampling_runs_and_stays_in_vocabulary():
    target = make_model(V, layers=2, hidden=32, seed=1, init=0.3)
    draft, _ = quantize_draft(make_model(V, layers=1, hidden=32, seed=2, init=0.3), "int8")
    gen = generate(target, DraftModelProposer(draft), [7, 11, 13], 3, 20, SamplingParams(1.0),
                   generator=torch.Generator().manual_seed(0))
    assert len(gen.tokens) == 20 and all(0 <= t < V for t in gen.tokens)


def test_modes_none_and_auto():
    draft = make_model(V, layers=1, hidden=32)
    same, plan = quantize_draft(draft, "none")
    assert same is draft and not plan["quantized"]
    assert all(type(m) is nn.Linear for m in draft.modules() if isinstance(m, nn.Linear))
    plan = plan_quant(draft, "auto")  # timed: the choice follows the measurement
    assert plan["float_ms"] > 0 and plan["int8_ms"] > 0
    assert plan["quantized"] == (plan["int8_ms"] < 0.95 * plan["float_ms"])
    with pytest.raises(ValueError, match="draft_quant must be one of"):
        plan_quant(draft, "int2")


@pytest.mark.parametrize("kind", ["medusa", "eagle", "eagle3"])
def test_int8_feature_draft_quantizes_its_own_layers_and_cut_head_never_the_targets(kind):
    from decode.drafts.draft_vocab import SubsetHead, restrict_vocab
    from decode.drafts.eagle3 import Eagle3Draft
    from decode.proposers.feature_decoding import draft_proposer
    from decode.drafts.feature_drafts import EagleDraft, MedusaHeads

    target = make_model(V, layers=2, hidden=32, seed=1, init=0.3)
    head_before = target.get_output_embeddings().weight.clone()
    fresh = {"medusa": lambda: MedusaHeads.from_target(target, 2), "eagle": lambda: EagleDraft.from_target(target),
             "eagle3": lambda: Eagle3Draft.from_target(target)}[kind]()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in fresh.parameters():
            p.add_(0.2 * torch.randn_like(p))
    fresh.eval()
    prompt = [7, 11, 13, 40, 90]
    reference = generate(target, NoProposer(), prompt, 0, 20).tokens

    uncut, plan = quantize_draft(fresh, "int8", copy=True)  # full head: the target's own, left as it is
    assert plan["quantized"] and not [m for m in uncut.modules() if type(m) is nn.Linear]
    assert type(uncut.get_output_embeddings()) is nn.Linear and uncut.get_output_embeddings() is target.lm_head
    assert type(fresh.get_output_embeddings()) is nn.Linear  # the original draft untouched
    assert not [m for m in fresh.modules() if isinstance(m, Int8Linear)]

    cut, _ = restrict_vocab(fresh, V // 2, copy=True)
    fast, _ = quantize_draft(cut, "int8", copy=True)
    assert isinstance(fast.get_output_embeddings(), SubsetHead)
    assert isinstance(fast.get_output_embeddings().proj, Int8Linear)
    assert type(cut.get_output_embeddings().proj) is nn.Linear  # the copy got its own head
    assert torch.equal(target.get_output_embeddings().weight, head_before) and type(target.lm_head) is nn.Linear
    for draft in (uncut, fast):
        run = generate(target, draft_proposer(draft), prompt, 2, 20)
        assert run.tokens == reference  # lossless: the target's logits decide
        assert sum(s.drafted for s in run.steps) > 0
