"""Drafts exported by Draftsmith, served by the real llama.cpp (integration: needs `make setup-llamacpp`, skipped with
the reason otherwise): a standalone draft's GGUF (draft-simple) and an EAGLE-3 draft's (draft-eagle3) leave
llama-server's greedy output identical to llama.cpp plain on the embedded 135M target."""

from pathlib import Path

import pytest
import torch

from eval.llamacpp import LlamaServer
from eval.shared.gguf import export_gguf, gguf_of, llamacpp_dir, spec_type_of

TARGET = "embedded:smollm2-135m-instruct"
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def target_dir():
    if not (llamacpp_dir() / "bin" / "llama-server").is_file():
        pytest.skip("llama.cpp is not built here (make setup-llamacpp)")
    from decode.models.loading import resolve

    return Path(resolve(TARGET))


def served_identically(draft_gguf: Path, spec_type: str, tmp_path: Path) -> list[int]:
    """Greedy answers to three prompts from llama.cpp plain and with the draft; returns the draft's accepted counts."""
    from data.prompts import encode_prompt, load_prompts
    from decode.models.loading import load_tokenizer

    tokenizer = load_tokenizer(TARGET)
    prompts = [encode_prompt(tokenizer, p) for p in load_prompts("general", 3, None, "tune")]
    target = gguf_of(TARGET)
    with LlamaServer(target, log=tmp_path / "plain.log") as plain:
        expected = [plain.completion(p, 32).tokens for p in prompts]
    with LlamaServer(target, draft_gguf=draft_gguf, spec_type=spec_type, draft_max=3, log=tmp_path / "spec.log") as s:
        runs = [s.completion(p, 32) for p in prompts]
    assert [r.tokens for r in runs] == expected and all(len(t) > 0 for t in expected)
    assert all(r.drafted > 0 for r in runs), (tmp_path / "spec.log").read_text()[-2000:]
    return [r.accepted for r in runs]


def test_a_standalone_draft_export_is_served_with_plains_output(target_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    model.model.layers = model.model.layers[:4]  # a cut of the target: the shape of the default draft
    model.config.num_hidden_layers = 4
    model.save_pretrained(tmp_path / "draft")
    AutoTokenizer.from_pretrained(target_dir).save_pretrained(tmp_path / "draft")
    assert spec_type_of(str(tmp_path / "draft")) == "draft-simple"
    accepted = served_identically(export_gguf(tmp_path / "draft", kind="q8_0"), "draft-simple", tmp_path)
    assert sum(accepted) > 0  # a cut of the target itself agrees with it somewhere


def test_an_eagle3_draft_export_is_served_by_draft_eagle3_with_plains_output(target_dir, tmp_path):
    import json

    from decode.drafts.eagle3 import Eagle3Draft
    from decode.drafts.feature_export import write_feature_weights
    from decode.models.loading import load_frozen

    target = load_frozen(TARGET)
    torch.manual_seed(0)
    draft = Eagle3Draft.from_target(target)  # untrained: accepts little, but must never change the output
    folder = tmp_path / "eagle3"
    folder.mkdir()
    write_feature_weights(draft, folder, TARGET, list(target.config.architectures or []), gamma=3)
    (folder / "draftsmith.json").write_text(json.dumps({"draft_kind": "eagle3", "draft_config": draft.config_dict()}))
    assert spec_type_of(str(folder)) == "draft-eagle3"
    served_identically(export_gguf(folder, kind="f16"), "draft-eagle3", tmp_path)
