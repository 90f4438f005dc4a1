"""Serving engines behind one interface (eval/engines.py): eval/speculate.py times every engine's arms beside our
decoder, each over the same engine's plain decoding; vLLM's arms (a fake server here; a real one in test_vllm.py's
integration test); and a new engine is one module plus one ENGINES line, with no other change."""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass, field

import pytest
import torch

import eval.engines
import eval.shared.vllm_server
import eval.vllm
from eval.engines import Setting, plain_of


def test_each_setting_is_measured_against_its_own_engines_plain():
    arms = [(Setting("a", "plain"), None), (Setting("a", "draft", "d", 2), None), (Setting("b", "plain"), None),
            (Setting("b", "ngram", None, 3), None)]
    assert [plain_of(arms, s) for s, _ in arms] == [0, 0, 2, 2]
    assert arms[1][0].proposer == "a draft" and arms[1][0].name == "d" and arms[3][0].name == "b ngram"


@dataclass
class FakeCompletion:
    tokens: list
    seconds: float
    drafted: int = 0
    accepted: int = 0
    rejected: int = 0
    steps: list = field(default_factory=list)
    prefill_s: float = 0.0

    @property
    def decode_s(self):
        return self.seconds


class FakeVllmServer:
    """Answers as the target's greedy decoding does; a speculative one reports 3 drafted, 2 accepted, 1 rejected."""
    started: list = []

    def __init__(self, model, spec=None, **kwargs):
        from decode.models.loading import load_frozen

        self.target, self.spec = load_frozen(str(model), dtype="float32"), spec
        FakeVllmServer.started.append(spec)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def completion(self, prompt, max_tokens, temperature=0.0, seed=0):
        row = self.target.generate(torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False)
        spec = self.spec is not None
        return FakeCompletion(row[0, len(prompt):].tolist(), 0.01 if spec else 0.02, 3 * spec, 2 * spec, spec)


def test_vllm_arms_run_in_speculate_s_interleaved_run_over_vllm_plain(tmp_path, tiny_target_dir, tiny_draft_dir,
                                                                       monkeypatch):
    from test_eval import eval_cfg

    from eval.speculate import evaluate

    monkeypatch.setattr(eval.vllm, "VllmServer", FakeVllmServer)
    monkeypatch.setattr(eval.shared.vllm_server, "vllm_bin", lambda cache_dir=None: sys.executable)
    FakeVllmServer.started = []
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[2]", "domains=[code]",
                                "vllm=[draft,ngram]"))
    served = [r for r in records if r["engine"] == "vllm"]
    assert [r["proposer"] for r in served] == ["vllm plain", "vllm draft", "vllm ngram"]
    assert all(r["speedup_over"] == "vllm plain" and r["greedy_identical"] is True for r in served)
    assert served[0]["speedup"] == 1.0 and served[1]["speedup"] == pytest.approx(2.0, rel=0.05)
    assert served[1]["alpha"] == pytest.approx(2 / 3) and served[1]["accepted_per_proposed"] == pytest.approx(2 / 3)
    assert [s and s["method"] for s in FakeVllmServer.started] == [None, "draft_model", "ngram"]
    assert FakeVllmServer.started[1]["num_speculative_tokens"] == 2
    assert FakeVllmServer.started[2]["prompt_lookup_min"] == 2 and FakeVllmServer.started[2]["prompt_lookup_max"] == 4


ECHO_ENGINE = '''
"""A fifth engine for the test: "serves" by echoing the prompt's last token."""
from dataclasses import dataclass, field

from eval.engines import Setting


@dataclass
class Echoed:
    tokens: list
    prefill_s: float = 0.0
    decode_s: float = 0.001
    steps: list = field(default_factory=list)


class EchoEngine:
    name, key = "echo", "echo"

    def settings(self, cfg):
        return [Setting(self.name, "plain")]

    def start(self, setting, cfg, stack, log):
        return lambda prompt, max_new_tokens, params, eos, generator: Echoed([prompt[-1]] * max_new_tokens)

    def describe(self, cfg):
        return "echo 1.0"


ENGINE = EchoEngine()
'''


def test_a_new_engine_is_one_module_and_one_registry_line(tmp_path, tiny_target_dir, tiny_draft_dir, monkeypatch):
    from test_eval import eval_cfg

    from eval.speculate import evaluate

    (tmp_path / "echo_engine.py").write_text(textwrap.dedent(ECHO_ENGINE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(eval.engines.ENGINES, "echo", "echo_engine:ENGINE")
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[2]", "domains=[code]",
                                "+echo=[plain]"))
    echo = [r for r in records if r["engine"] == "echo"]
    assert len(echo) == 1 and echo[0]["proposer"] == "echo plain" and echo[0]["speedup"] == 1.0


REPEAT_PROPOSER = '''
"""A proposer for the test: drafts the last token again, gamma times (no draft model)."""
import torch


class RepeatProposer:
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def start(self, prompt):
        pass

    def propose(self, tokens, gamma, params, generator):
        drafted = [tokens[-1]] * gamma
        return drafted, torch.nn.functional.one_hot(torch.tensor(drafted, dtype=torch.long), self.vocab_size).float()

    def rollback(self, keep):
        pass


def build(request):
    return RepeatProposer(request.target.get_output_embeddings().weight.shape[0])
'''


def test_a_new_proposer_is_one_module_and_one_registry_line(tmp_path, tiny_target_dir, tiny_draft_dir, monkeypatch):
    from test_eval import eval_cfg

    from decode.proposers.registry import PROPOSERS, ProposerKind
    from eval.speculate import evaluate

    (tmp_path / "repeat_proposer.py").write_text(textwrap.dedent(REPEAT_PROPOSER))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(PROPOSERS, "repeat", ProposerKind("repeat", "repeat_proposer:build", "the last token again",
                                                          drafts_with="none", gamma="fixed"))
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[2]", "domains=[code]",
                                "proposers=[draft,repeat]"))
    repeat = [r for r in records if r["proposer"] == "repeat"]
    assert len(repeat) == 1 and repeat[0]["draft"] == "repeat" and repeat[0]["greedy_identical"]
    assert repeat[0]["mean_drafted"] > 0  # it drafted through the one loop, which checked it against the target
