"""Compiled decoding on static caches (decode/kernels/compiled.py): same tokens as eager decoding, caches per role,
clear errors. torch.compile on CPU takes seconds to a minute per pass shape on a cold cache, so every test that
compiles is in the integration step (`make test-integration`); the pure sizing rule stays in the fast suite."""

import pytest
import torch

from conftest import make_model
from decode.core.speculative import CachedLM, NoProposer, SamplingParams, generate
from decode.drafts.quantize import quantize_draft
from decode.kernels.compiled import compiled_decoding, run_length, static_decoding
from decode.kernels.fast_linear import fast_cpu_linears
from decode.proposers.draft_model import DraftModelProposer

V = 300
PROMPT = [7, 11, 13, 40, 90, 5, 17]


@pytest.fixture(scope="module")
def pair():
    return make_model(V, layers=3, hidden=32, seed=1, init=0.3), make_model(V, layers=1, hidden=32, seed=2, init=0.3)


@pytest.mark.integration
def test_greedy_output_and_acceptance_identical_to_eager(pair):
    target, draft = pair
    eager_only = generate(target, NoProposer(), PROMPT, 0, 20).tokens
    eager = generate(target, DraftModelProposer(draft), PROMPT, 3, 20)
    with compiled_decoding([target, draft], max_len=64, max_rows=4):
        assert static_decoding(target) is not None
        only = generate(target, NoProposer(), PROMPT, 0, 20).tokens
        spec = generate(target, DraftModelProposer(draft), PROMPT, 3, 20)
        again = generate(target, DraftModelProposer(draft), PROMPT[:4], 3, 20)  # caches reused, emptied
    assert static_decoding(target) is None
    assert only == eager_only == spec.tokens == eager.tokens
    assert [(s.drafted, s.accepted) for s in spec.steps] == [(s.drafted, s.accepted) for s in eager.steps]
    assert again.tokens == generate(target, DraftModelProposer(draft), PROMPT[:4], 3, 20).tokens


@pytest.mark.integration
def test_logits_after_rollback_equal_a_fresh_pass(pair):
    target, _ = pair
    with compiled_decoding([target], max_len=32, max_rows=3):
        lm = CachedLM(target)
        lm.reset()
        lm.extend(PROMPT)
        lm.extend([1, 2, 3])
        lm.rollback(len(PROMPT))  # the stale three stay in the static cache, past the write position
        after = lm.extend([50, 60])
    fresh = CachedLM(target)
    fresh.reset()
    fresh.extend(PROMPT)
    torch.testing.assert_close(after, fresh.extend([50, 60]), rtol=1e-4, atol=1e-4)


@pytest.mark.integration
def test_target_as_its_own_draft_keeps_two_caches(pair):
    target, _ = pair
    with compiled_decoding([target], max_len=64, max_rows=3):
        gen = generate(target, DraftModelProposer(target), PROMPT, 2, 12)
    assert all(s.accepted == s.drafted for s in gen.steps)
    assert gen.tokens == generate(target, NoProposer(), PROMPT, 0, 12).tokens


@pytest.mark.integration
def test_sampling_with_the_matmul_layouts_and_an_int8_draft(pair):
    target, draft = pair
    fast_draft, _ = quantize_draft(draft, "int8", copy=True)
    params = SamplingParams(temperature=1.0)
    with fast_cpu_linears([target, fast_draft], max_rows=3), compiled_decoding([target, fast_draft], 64, 3):
        gen = generate(target, DraftModelProposer(fast_draft), PROMPT, 2, 16, params,
                       generator=torch.Generator().manual_seed(0))
    assert len(gen.tokens) == 16 and all(0 <= t < V for t in gen.tokens)
    assert all(0 <= s.accepted <= s.drafted for s in gen.steps)


@pytest.mark.integration
def test_overflow_and_bad_sizes_fail_naming_the_fix(pair):
    target, _ = pair
    with compiled_decoding([target], max_len=16, max_rows=2):
        with pytest.raises(ValueError, match="larger max_len"):
            generate(target, NoProposer(), PROMPT, 0, 20)
    with pytest.raises(ValueError, match="max_len"):
        with compiled_decoding([target], max_len=1, max_rows=2):
            pass


@pytest.mark.integration
def test_disabled_block_changes_nothing(pair):
    target, _ = pair
    with compiled_decoding([target], max_len=64, max_rows=2, enabled=False):
        assert static_decoding(target) is None


def test_run_length_fits_prompts_new_tokens_and_one_verification():
    assert run_length([[1] * 10, [1] * 70], 100, 3) == 192  # 70 + 100 + 4 = 174, rounded up to 64s
    assert run_length([[1]], 63, 0) == 128


@pytest.mark.integration
def test_each_new_pass_shape_is_announced_once(pair, caplog):
    target, _ = pair
    with caplog.at_level("INFO", logger="decode.kernels.compiled"), compiled_decoding([target], max_len=64, max_rows=2):
        generate(target, NoProposer(), PROMPT, 0, 6)
        generate(target, NoProposer(), PROMPT, 0, 6)
    assert sum("first 1-token pass" in r.message for r in caplog.records) == 1


@pytest.mark.integration
def test_a_cut_draft_head_compiled_keeps_greedy_output_identical():
    from decode.drafts.draft_vocab import restrict_vocab

    target, draft = make_model(V, layers=3, seed=1, init=0.3), make_model(V, layers=1, seed=2, init=0.3)
    prompt = [7, 11, 13, 40, 90]
    reference = generate(target, NoProposer(), prompt, 0, 24).tokens
    small, _ = restrict_vocab(draft, 48, keep=[2], copy=True)
    with compiled_decoding([target, small], 64, 3):
        assert generate(target, DraftModelProposer(small), prompt, 2, 24).tokens == reference
