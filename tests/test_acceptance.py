"""eval/acceptance.py: expected acceptance along the target's continuations (alpha_tf)."""

import json
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir

from conftest import CONF, make_model
from decode.core.metrics import acceptance
from decode.core.speculative import SamplingParams, generate_all
from decode.proposers.draft_model import DraftModelProposer
from eval.acceptance import (continuations, cut_at_eos, evaluate, paired_difference, position_betas, ratio_and_stderr,
                             score)


def acc_cfg(tmp_path, target, drafts, *extra):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("acceptance", overrides=[f"target={target}", f"drafts=[{','.join(map(str, drafts))}]",
                                                "max_new_tokens=10", "n_prompts=3", "samples_per_prompt=2",
                                                f"out={tmp_path / 'acc'}", "domains=[general,code]", *extra])


def test_end_to_end_files_and_self_draft(tmp_path, tiny_target_dir, tokenizer):
    other = tmp_path / "other"
    make_model(len(tokenizer), layers=1, seed=7, init=0.3).save_pretrained(other)
    tokenizer.save_pretrained(other)
    records = evaluate(acc_cfg(tmp_path, tiny_target_dir, [tiny_target_dir, other]))
    assert len(records) == 2 * 2 * 2  # drafts x domains x temperatures
    for r in records:
        assert r["n_sequences"] == (3 if r["temperature"] == 0 else 6) and r["positions"] > 0
        assert sum(b["n"] for b in r["accept_by_entropy"]) == r["positions"]
        assert sum(r["lengths"]) == r["positions"] and len(r["beta_sums"]) == r["n_sequences"]
        if r["draft"] == str(tiny_target_dir):  # draft == target accepts everything
            assert r["alpha_tf"] == pytest.approx(1.0, abs=1e-5) and r["over_first_draft"] is None  # the reference
        else:
            assert 0 <= r["alpha_tf"] < 1
            ref = next(x for x in records if x["draft"] == str(tiny_target_dir) and x["domain"] == r["domain"]
                       and x["temperature"] == r["temperature"])
            assert r["over_first_draft"]["diff"] == pytest.approx(r["alpha_tf"] - ref["alpha_tf"], abs=1e-6)
            assert r["over_first_draft"]["stderr"] >= 0
    saved = json.loads((tmp_path / "acc" / "results.json").read_text())
    assert saved["records"] == json.loads(json.dumps(records)) and "method" in saved["conditions"]
    assert (tmp_path / "acc" / "results.md").read_text().count("\n|") >= 3
    assert (tmp_path / "acc" / "alpha_by_entropy.png").stat().st_size > 1000
    assert not (tmp_path / "acc" / "results.partial.json").exists()  # the full report replaced it


def test_a_crash_keeps_the_blocks_measured_so_far(tmp_path, tiny_target_dir, monkeypatch, caplog):
    import eval.acceptance as acceptance

    real, calls = acceptance.score, []

    def crash_on_second_block(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(acceptance, "score", crash_on_second_block)
    with pytest.raises(KeyboardInterrupt):
        evaluate(acc_cfg(tmp_path, tiny_target_dir, [tiny_target_dir]))
    partial = json.loads((tmp_path / "acc" / "results.partial.json").read_text())
    assert partial["complete"] is False and "method" in partial["conditions"]
    assert [(r["domain"], r["temperature"]) for r in partial["records"]] == [("general", 0.0)]
    assert not (tmp_path / "acc" / "results.json").exists() and "results.partial.json" in caplog.text


def test_split_tune_scores_the_tune_prompts(tmp_path, tiny_target_dir, monkeypatch):
    import eval.acceptance as acceptance
    from data.prompts import load_prompts, split_of

    asked = []

    def spy(domain, n, prompts_file=None, split="test"):
        asked.append(split)
        return load_prompts(domain, n, prompts_file, split)

    monkeypatch.setattr(acceptance, "load_prompts", spy)
    evaluate(acc_cfg(tmp_path, tiny_target_dir, [tiny_target_dir], "split=tune", "temperature=[0]"))
    assert asked == ["tune", "tune"]  # both domains
    saved = json.loads((tmp_path / "acc" / "results.json").read_text())
    assert saved["conditions"]["split"] == "tune"
    assert {split_of(p) for p in load_prompts("code", 3, None, "tune")} == {"tune"}


def test_bad_settings_fail_before_work(tmp_path, tiny_target_dir):
    with pytest.raises(ValueError, match="samples_per_prompt"):
        evaluate(acc_cfg(tmp_path, tiny_target_dir, [tiny_target_dir], "samples_per_prompt=0"))
    with pytest.raises(ValueError, match="temperature"):
        evaluate(acc_cfg(tmp_path, tiny_target_dir, [tiny_target_dir], "temperature=[-1]"))


def test_helpers_on_hand_made_inputs():
    assert cut_at_eos([5, 6, 2, 0, 0], {2}) == [5, 6, 2]
    assert cut_at_eos([5, 6, 7], {2}) == [5, 6, 7]
    alpha, se = ratio_and_stderr([3.0, 1.0], [4, 4])
    assert alpha == 0.5 and se == pytest.approx(0.25)  # per-sequence rates 0.75 and 0.25
    diff, se = paired_difference([3.0, 2.0], [2.0, 1.0], [4, 4])  # one draft ahead by 1/4 on both sequences
    assert diff == pytest.approx(0.25) and se == pytest.approx(0.0)
    t = torch.tensor([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    d = torch.tensor([[2.0, 0.0, 0.0], [5.0, 0.0, 1.0]])
    assert position_betas(t, d, 0.0).tolist() == [1.0, 0.0]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_alpha_tf_agrees_with_real_decoding_at_gamma_1(temperature):
    """The estimator and the decoder measure the same alpha: 24 prompts x 16 tokens on tiny random models."""
    target = make_model(300, layers=2, seed=1, init=0.3)
    draft = make_model(300, layers=2, seed=1, init=0.3)  # the target with noisy weights: alpha well inside (0, 1)
    with torch.no_grad():
        for w in draft.parameters():
            w.add_(0.02 * torch.randn(w.shape, generator=torch.Generator().manual_seed(w.numel())))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 300, (4,), generator=g).tolist() for _ in range(24)]
    cfg = SimpleNamespace(top_k=None, top_p=None, batch_size=24, max_new_tokens=16)
    conts = continuations(target, SimpleNamespace(pad_token_id=0), prompts, temperature, cfg, set(), seed=0)
    acc = score(target, {"d": draft}, list(zip(prompts, conts)), temperature, cfg)["d"]
    alpha_tf, se = ratio_and_stderr(acc["sums"], acc["counts"])
    real = acceptance(generate_all(target, DraftModelProposer(draft), prompts, 1, 16,
                                   SamplingParams(temperature), None, seed=0)["steps"])
    events = real["accepted"] + real["rejected"]
    tolerance = 3 * (se ** 2 + real["alpha"] * (1 - real["alpha"]) / events) ** 0.5
    assert 0.05 < alpha_tf < 0.95
    assert abs(alpha_tf - real["alpha"]) < tolerance + 0.02, (alpha_tf, real["alpha"], tolerance)
