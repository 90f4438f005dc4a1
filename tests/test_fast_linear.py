"""The small-batch CPU matmul layouts (decode/kernels/fast_linear.py): same products, same decoding, restored on exit."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from torch import nn

from conftest import make_model
from decode.kernels.fast_linear import (FastLinear, can_prepack, fast_cpu_linears, plan_for, prepack, prepacked_linear,
                                rows_first_linear)
from decode.core.speculative import NoProposer, generate
from decode.proposers.draft_model import DraftModelProposer

V = 300


needs_onednn = pytest.mark.skipif(not can_prepack(torch.zeros(1, 1)), reason="torch built without oneDNN")
LAYOUT_FNS = [pytest.param(rows_first_linear, id="rows_first"),
              pytest.param(lambda x, w, b: prepacked_linear(x, prepack(w), b), id="prepacked", marks=needs_onednn)]


@pytest.mark.parametrize("linear", LAYOUT_FNS)
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.integers(1, 40), st.integers(1, 40), st.booleans(),
       st.integers(0, 10_000))
def test_each_layout_is_the_same_linear_map(linear, lead, k, n, bias, seed):
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(*lead, k, generator=g), torch.randn(n, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    out = linear(x, w, b)
    assert out.shape == (*lead, n) and out.is_contiguous()
    torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["rows_first", pytest.param("prepacked", marks=needs_onednn)])
def test_layers_swapped_inside_restored_outside_and_output_unchanged(mode):
    model = make_model(V, layers=2, hidden=32, seed=3, init=0.3)
    ids = torch.tensor([[5, 9, 17]])
    with torch.no_grad():
        before = model(ids).logits
    with fast_cpu_linears([model], max_rows=4, mode=mode) as plans:
        assert plans[0]["layout"] == [mode] * 4
        layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
        assert layers and all(type(m) is FastLinear for m in layers)
        assert all((m._packed is not None) == (mode == "prepacked") for m in layers)
        with torch.no_grad():
            inside = model(ids).logits
    assert all(type(m) is nn.Linear and not hasattr(m, "_layout") and m.__dict__.get("_packed") is None
               for m in model.modules() if isinstance(m, nn.Linear))
    torch.testing.assert_close(inside, before, rtol=1e-5, atol=1e-5)
    assert set(model.state_dict()) == set(make_model(V, layers=2, hidden=32).state_dict())


@needs_onednn
def test_tied_weights_are_packed_once():
    model = make_model(V, layers=1, hidden=32, seed=3)
    model.lm_head.weight = model.model.embed_tokens.weight
    extra = nn.Linear(32, V, bias=False)
    extra.weight = model.lm_head.weight
    with fast_cpu_linears([nn.ModuleList([model, extra])], max_rows=2, mode="prepacked"):
        assert model.lm_head._packed is extra._packed


@pytest.mark.parametrize("mode", ["rows_first", pytest.param("prepacked", marks=needs_onednn)])
def test_gradients_take_torchs_path_inside_the_block(mode):
    layer = nn.Linear(8, 5)
    x = torch.randn(2, 8)
    with fast_cpu_linears([layer], max_rows=4, mode=mode):
        assert type(layer) is FastLinear
        layer(x).sum().backward()
    reference = nn.Linear(8, 5)
    reference.load_state_dict(layer.state_dict())
    reference(x).sum().backward()
    torch.testing.assert_close(layer.weight.grad, reference.weight.grad)


@pytest.mark.parametrize("mode", ["rows_first", pytest.param("prepacked", marks=needs_onednn)])
@pytest.mark.parametrize("gamma", [1, 2, 4])
def test_greedy_speculative_output_unchanged_by_the_layout(gamma, mode):
    target = make_model(V, layers=3, hidden=32, seed=1, init=0.3)
    draft = make_model(V, layers=1, hidden=32, seed=2, init=0.3)
    prompt = [7, 11, 13, 40, 90]
    reference = generate(target, NoProposer(), prompt, 0, 24).tokens
    with fast_cpu_linears([target, draft], max_rows=gamma + 1, mode=mode):
        assert generate(target, NoProposer(), prompt, 0, 24).tokens == reference
        assert generate(target, DraftModelProposer(draft), prompt, gamma, 24).tokens == reference


def test_auto_times_every_layout_and_picks_the_fastest_clear_win():
    model = make_model(V, layers=1, hidden=32, seed=4)
    plan = plan_for(model, max_rows=3, mode="auto")
    ms = plan["ms"]
    assert {"torch", "rows_first"} <= set(ms) and all(len(v) == 3 for v in ms.values())
    for i, chosen in enumerate(plan["layout"]):
        fastest = min(ms, key=lambda name: ms[name][i])
        assert chosen == (fastest if ms[fastest][i] < 0.95 * ms["torch"][i] else "torch")
    assert plan_for(model, max_rows=3, mode="torch")["layout"] == ["torch"] * 3


def test_bad_mode_and_rows_fail_naming_the_fix():
    model = make_model(V, layers=1, hidden=32)
    with pytest.raises(ValueError, match="cpu_matmul must be one of"):
        plan_for(model, 2, "fast")
    with pytest.raises(ValueError, match="max_rows"):
        plan_for(model, 0)


def run_bench_decoder(tmp_path, target_dir, draft_dir, *extra):
    import importlib.util

    from hydra import compose, initialize_config_dir

    from conftest import CONF, REPO

    spec = importlib.util.spec_from_file_location("bench_decoder", REPO / "scripts" / "bench_decoder.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("bench_decoder", overrides=[f"target={target_dir}", f"draft={draft_dir}", "gamma=2",
                                                  "n_prompts=2", "max_new_tokens=8", "repeats=1",
                                                  "cpu_matmul=rows_first", "draft_quant=int8",
                                                  "draft_vocab=64", f"out={tmp_path / 'bench'}", *extra])
    return script.bench(cfg)


def test_bench_decoder_runs_every_method_and_outputs_agree(tmp_path, tiny_target_dir, tiny_draft_dir):
    result = run_bench_decoder(tmp_path, tiny_target_dir, tiny_draft_dir, "prompt_lookup=true")
    methods = {r["method"]: r for r in result["rows"]}
    assert set(methods) == {"ours_target_only", "ours_speculative", "hf_target_only", "hf_assisted",
                            "hf_assisted_our_kernels", "ours_speculative_float_draft", "ours_speculative_full_head",
                            "ours_prompt_lookup", "hf_prompt_lookup"}
    assert all(r["identical_to_target_greedy"] for r in methods.values())
    assert result["conditions"]["cpu_matmul_plans"]["target"]["layout"] == ["rows_first"] * 3
    assert result["conditions"]["draft_quant_plan"]["quantized"]  # ours and hf_assisted_our_kernels: int8 draft
    assert result["conditions"]["draft_vocab_plan"]["restricted"]  # ours: a 64-id draft head, full_head: all ids
    # the int8 draft and the cut head may propose other tokens than the float full-head draft: alpha is recorded
    # for each speculative row, and none for transformers' (it does not report acceptance)
    assert all(isinstance(methods[m]["alpha"], float) for m in ("ours_speculative", "ours_speculative_float_draft",
                                                                  "ours_speculative_full_head"))
    assert methods["hf_assisted"]["alpha"] is None
    assert (tmp_path / "bench" / "bench_decoder.json").is_file()


@pytest.mark.integration
def test_bench_decoder_compiled_rows_agree_with_eager(tmp_path, tiny_target_dir, tiny_draft_dir):
    result = run_bench_decoder(tmp_path, tiny_target_dir, tiny_draft_dir, "compile=true")
    methods = {r["method"]: r for r in result["rows"]}
    assert {"ours_target_only_compiled", "ours_speculative_compiled"} <= set(methods)
    assert all(r["identical_to_target_greedy"] for r in methods.values())
    assert methods["ours_speculative_compiled"]["alpha"] == methods["ours_speculative"]["alpha"]
    assert result["ours_compiled_vs_hf_assisted"] > 0


@needs_onednn
def test_packs_are_reused_until_the_weight_changes():
    layer = nn.Linear(8, 5)
    with fast_cpu_linears([layer], max_rows=2, mode="prepacked"):
        first = layer._packed
    with fast_cpu_linears([layer], max_rows=2, mode="prepacked"):
        assert layer._packed is first  # a block per prompt reorders nothing again
    with torch.no_grad():
        layer.weight.add_(1.0)
    x = torch.randn(2, 8)
    with fast_cpu_linears([layer], max_rows=2, mode="prepacked"), torch.no_grad():
        assert layer._packed is not first
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


def test_layout_timing_leaves_out_a_burst_of_load():
    """The layouts take turns and each keeps its fastest pass: one slow pass (load from elsewhere on a shared
    machine) does not make a faster layout lose."""
    import time

    from decode.kernels.fast_linear import _sweep_ms

    calls = {"fast": 0}

    def fast(x, w):
        calls["fast"] += 1
        time.sleep(0.030 if calls["fast"] == 2 else 0.002)  # its first timed pass hits a burst

    def slow(x, w):
        time.sleep(0.006)

    ms = _sweep_ms({"torch": ([torch.zeros(3, 4)], slow), "fast": ([torch.zeros(3, 4)], fast)}, rows=1, repeats=3)
    assert ms["fast"] < ms["torch"] and calls["fast"] == 4  # one warm-up + 3 timed passes
