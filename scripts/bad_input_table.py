"""Every bad-input case of the entry points, run as a user runs them: exit status, message, seconds to fail.

    python scripts/bad_input_table.py                       # prints the table, writes docs/bad-input.md
    python scripts/bad_input_table.py --only speculate      # the cases of one entry point

Each case builds its inputs in a temporary folder, runs `python <entry point> <args>` with the embedded default
target (converted once by `make setup`'s first run; `--target` for another folder) and records what came back. A
case passes when it exits with status 2 in one line naming the input, without a traceback, within its limit: 2 s
where no model file is opened, 10 s where one is (a tokenizer, to measure a prompt). tests/test_bad_input.py runs the
same cases in-process in the fast suite, and all of them as programs in the integration suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "bad-input.md"
START, END = "<!-- cases:start -->", "<!-- cases:end -->"
ENTRIES = {  # script -> (config name, "module:check function")
    "eval/speculate.py": ("speculate", "eval.checks:check_speculate"),
    "eval/acceptance.py": ("acceptance", "eval.checks:check_acceptance"),
    "eval/compare.py": ("compare", "eval.checks:check_compare"),
    "train/distill.py": ("distill", "train.checks:check_distill"),
    "scripts/export_draft.py": ("export_draft", "eval.checks:check_export"),
    "scripts/generate_data.py": ("generate_data", "eval.checks:check_generate"),
    "scripts/cache_teacher.py": ("cache_teacher", "eval.checks:check_cache_teacher"),
    "scripts/bench_decoder.py": ("bench_decoder", "eval.checks:check_bench_decoder"),
    "scripts/export_gguf.py": ("export_gguf", "eval.checks:check_export_gguf"),
    "scripts/bench_vllm.py": ("bench_vllm", "eval.checks:check_bench_vllm"),
}
LONG_PROMPT = " ".join(["Explain why the sky is blue in great detail"] * 1200)  # > 8192 tokens


@dataclass
class Case:
    what: str               # the bad input, in a user's words
    entry: str              # the script
    args: list[str]         # overrides; {tmp} the case's folder, {target} the target, {draft} a complete draft
    expect: str             # a fragment the message must hold
    files: dict = field(default_factory=dict)  # name in {tmp} -> text | bytes | a builder's name
    opens_model_files: bool = False  # a tokenizer is read (limit 10 s) rather than config values and small files
    locked: str | None = None  # a folder in {tmp} that a live run holds (its lock taken by another process)


def checkpoint_bytes(layers=(0, 2)) -> bytes:
    """A whole checkpoint archive as torch writes it (a zip with data.pkl), its tensors left out: Draftsmith's meta
    says which draft it holds (model.draft.layers `layers`)."""
    import io
    import pickle
    import zipfile

    meta = {"config": {"model": {"draft": {"kind": "truncated", "layers": list(layers), "source": None,
                                           "train_vocab": None}},
                       "lora": {"enabled": False, "r": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj",
                                                                           "gate_proj", "up_proj", "down_proj"]}}}
    blob = io.BytesIO()
    with zipfile.ZipFile(blob, "w") as archive:
        archive.writestr("last/data.pkl", pickle.dumps({"draftsmith": meta, "state_dict": {}, "global_step": 3}))
        archive.writestr("last/version", "3\n")
    return blob.getvalue()


def safetensors_bytes(cut: bool = False) -> bytes:
    """A minimal safetensors file (one float32 tensor); `cut`: its data cut short, as an interrupted copy leaves."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    blob = struct.pack("<Q", len(header)) + header + b"\0" * 16
    return blob[:-10] if cut else blob


S, D, A, X, G = ("eval/speculate.py", "train/distill.py", "eval/acceptance.py", "scripts/export_draft.py",
                 "scripts/generate_data.py")
CKPT = "checkpoint"  # files: a whole checkpoint archive of another draft shape (checkpoint_bytes)
QUICK = ["trainer.max_steps=1", "paths.output_dir={tmp}/run"]  # a distill run that would otherwise start
CASES = [
    Case("prompts file: malformed JSON on line 2", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"],
         "p.jsonl line 2 is not valid JSON", {"p.jsonl": '{"prompt": "hi"}\n{"prompt": "unterminated\n'}),
    Case("prompts file: empty", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"], "p.jsonl is empty",
         {"p.jsonl": ""}),
    Case("prompts file: only blank lines", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"], "only blank lines",
         {"p.jsonl": "\n  \n"}),
    Case("prompts file: a line with neither prompt nor messages", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"],
         'line 2 has neither "prompt" nor "messages"', {"p.jsonl": '{"prompt": "a"}\n{"text": "b"}\n'}),
    Case("prompts file: not UTF-8", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"], "line 1 is not UTF-8",
         {"p.jsonl": b'{"prompt": "caf\xe9"}\n'}),
    Case("prompts file: does not exist", S, ["drafts=[{draft}]", "prompts_file={tmp}/none.jsonl"],
         "none.jsonl does not exist"),
    Case("prompts file: messages not a list", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"],
         '"messages" must be a non-empty list', {"p.jsonl": '{"messages": "hi"}\n'}),
    Case("prompts file: unknown split", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"],
         '"split" must be tune or test', {"p.jsonl": '{"prompt": "a", "split": "train"}\n'}),
    Case("prompts file: a JSON array line", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"],
         "is a JSON list, not an object", {"p.jsonl": '["a"]\n'}),
    Case("prompt longer than the target's context", S,
         ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl", "n_prompts=2", "max_new_tokens=64"], "context holds",
         {"p.jsonl": json.dumps({"prompt": LONG_PROMPT}) + "\n" + json.dumps({"prompt": LONG_PROMPT}) + "\n"},
         opens_model_files=True),
    Case("draft folder does not exist", S, ["drafts=[{tmp}/no-such-export]"], "no-such-export does not exist"),
    Case("draft folder without config.json", S, ["drafts=[{tmp}/empty]"], "has no config.json", {"empty/": ""}),
    Case("draft export cut short (truncated safetensors)", S, ["drafts=[{tmp}/cut]"], "cut short", {"cut/": "cut"}),
    Case("draft of a foreign vocabulary", S, ["drafts=[{tmp}/foreign]"], "does not share the target's vocabulary",
         {"foreign/": "foreign"}),
    Case("unknown embedded model", S, ["drafts=[embedded:tiny-llama]"], "unknown embedded model 'tiny-llama'"),
    Case("a Hub id that is not cached, offline", S, ["drafts=[someorg/some-draft]"], "not in the Hugging Face cache"),
    Case("gamma out of range", S, ["drafts=[{draft}]", "gamma=[0]"], "gamma must be integers >= 1"),
    Case("negative temperature", S, ["drafts=[{draft}]", "temperature=[-1]"], "temperature must be >= 0"),
    Case("top_p out of range", S, ["drafts=[{draft}]", "top_p=1.5"], "top_p must be in (0, 1]"),
    Case("one prompt (no interval)", S, ["drafts=[{draft}]", "n_prompts=1"], "n_prompts >= 2"),
    Case("unknown domain", S, ["drafts=[{draft}]", "domains=[astrology]"], "domains must list built-in prompt sets"),
    Case("unknown proposer", S, ["drafts=[{draft}]", "proposers=[magic]"], "proposers must be a non-empty list"),
    Case("zero new tokens", S, ["drafts=[{draft}]", "max_new_tokens=0"], "max_new_tokens must be >= 1"),
    Case("drafts not given", S, [], "drafts is required"),
    Case("reference draft not among the drafts", S, ["drafts=[{draft}]", "reference_draft=other"],
         "reference_draft=other is not one of drafts"),
    Case("batch size beside a proposer batches do not run", S,
         ["drafts=[{draft}]", "batch_size=[1,4]", "gamma=[2]", "proposers=[tree]", "n_prompts=4"],
         "fixed gammas only"),
    Case("tree shape not a list", S, ["drafts=[{draft}]", "proposers=[tree]", "tree.branching=wide"],
         "tree.branching must be a non-empty list"),
    Case("tree.branching=auto with no room", S, ["drafts=[{draft}]", "proposers=[tree]", "tree.branching=auto",
                                                 "tree.max_nodes=0"], "needs tree.max_depth >= 1 and tree.max_nodes"),
    Case("output folder under a file", S, ["drafts=[{draft}]", "out={tmp}/file/out"], "is a file",
         {"file": "x"}),
    Case("training steps zero", D, QUICK + ["trainer.max_steps=0"], "trainer.max_steps must be >= 1"),
    Case("learning rate zero", D, QUICK + ["optim.lr=0"], "optim.lr must be in (0, 1]"),
    Case("learning rate above 1", D, QUICK + ["optim.lr=3"], "optim.lr must be in (0, 1]"),
    Case("learning rate not a number", D, QUICK + ["optim.lr=fast"], "optim.lr must be a number"),
    Case("JSD beta out of range", D, QUICK + ["loss.params.beta=1.5"], "loss.params.beta must be in (0, 1)"),
    Case("unknown domain", D, ["+domain=astrology"], "unknown domain 'astrology'"),
    Case("unknown loss", D, ["loss=bogus"], "unknown loss 'bogus'"),
    Case("unknown experiment", D, ["+experiment=nope"], "unknown experiment 'nope'"),
    Case("misspelt config key", D, ["trainer.max_stepz=3"], "unknown config key 'trainer.max_stepz'"),
    Case("override that does not parse", D, ["trainer.max_steps=[3"], "cannot parse the command's overrides"),
    Case("training data file missing", D, QUICK + ["data=files", "data.sources=[{kind: files, path: {tmp}/no.jsonl}]"],
         "no.jsonl does not exist"),
    Case("chat data: a line without messages", D,
         QUICK + ["data=files", "data.sources=[{kind: files, path: {tmp}/c.jsonl, format: chat}]"],
         "line 2 has no \"messages\"", {"c.jsonl": '{"messages": [{"role": "user", "content": "a"}]}\n{"text": "b"}\n'}),
    Case("answers to generate: zero prompts", D, QUICK + ["data.generate.n_prompts=0"],
         "data.generate.n_prompts must be >= 1"),
    Case("unknown embedded target", D, QUICK + ["model.target.name_or_path=embedded:nope"], "unknown embedded model"),
    Case("resume from a truncated checkpoint", D, QUICK + ["ckpt_path={tmp}/last.ckpt"], "not a complete checkpoint",
         {"last.ckpt": b"PK\x03\x04 cut short"}),
    Case("export folder exists", D, QUICK + ["export.dir={tmp}/export"], "already exists", {"export/": ""}),
    Case("acceptance: zero prompts", "eval/acceptance.py", ["drafts=[{draft}]", "n_prompts=0"],
         "n_prompts must be >= 1"),
    Case("acceptance: unknown split", "eval/acceptance.py", ["drafts=[{draft}]", "split=train"],
         "split must be test"),
    Case("export: checkpoint missing", "scripts/export_draft.py", ["ckpt_path={tmp}/x.ckpt", "out={tmp}/out"],
         "x.ckpt does not exist"),
    Case("export: checkpoint cut short", "scripts/export_draft.py", ["ckpt_path={tmp}/x.ckpt", "out={tmp}/out"],
         "not a complete checkpoint", {"x.ckpt": b"PK\x03\x04 cut short"}),
    Case("export: output folder exists", "scripts/export_draft.py", ["ckpt_path={tmp}/x.ckpt", "out={tmp}/out"],
         "out: ", {"x.ckpt": b"PK\x05\x06" + b"\0" * 18, "out/": ""}),
    Case("compare: not a finished run", "eval/compare.py", ["runs=[{tmp}/run]"], "has no summary.json",
         {"run/": ""}),
    Case("generate: unknown prompt set", "scripts/generate_data.py", ["prompts_from=astrology", "out={tmp}/a.jsonl"],
         "prompts_from must be one of"),
    Case("generate: speculative engine without a draft", "scripts/generate_data.py",
         ["engine=speculative", "out={tmp}/a.jsonl"], "engine=speculative needs a draft"),
    Case("generate: negative temperature", "scripts/generate_data.py", ["temperature=-0.5", "out={tmp}/a.jsonl"],
         "temperature must be >= 0"),
    Case("generate: unknown matmul layout", "scripts/generate_data.py", ["cpu_matmul=fast", "out={tmp}/a.jsonl"],
         "cpu_matmul must be torch or prepacked"),
    Case("training: unknown matmul layout for the answers", "train/distill.py", ["data.generate.cpu_matmul=fast"],
         "data.generate.cpu_matmul must be torch or prepacked"),
    Case("generate: unknown draft quantization", "scripts/generate_data.py",
         ["engine=speculative", "speculative.draft={draft}", "speculative.draft_quant=int3", "out={tmp}/a.jsonl"],
         "speculative.draft_quant must be none, int8, int4 or auto"),
    Case("teacher cache: top_k zero", "scripts/cache_teacher.py", ["top_k=0"], "top_k must be >= 1"),
    Case("teacher cache built by training: top-k zero", D, QUICK + ["teacher=cache", "loss=forward_kl",
         "spec_eval.enabled=false", "teacher_top_k=0"], "teacher_top_k must be >= 1"),
    Case("bench_decoder: gamma zero", "scripts/bench_decoder.py", ["draft={draft}", "gamma=0"], "gamma must be >= 1"),
    Case("GGUF export of a Medusa draft", "scripts/export_gguf.py", ["export={tmp}/medusa"],
         "llama.cpp drafts with standalone models and",
         {"medusa/config.json": "{}", "medusa/draftsmith.json": '{"draft_kind": "medusa"}',
          "medusa/model.safetensors": safetensors_bytes()}),
    Case("vLLM bench of an EAGLE-style (EAGLE-1) draft", "scripts/bench_vllm.py", ["drafts=[{tmp}/eagle]"],
         "which vLLM does not serve: vLLM reads speculators' eagle3 layout only",
         {"eagle/config.json": "{}", "eagle/draftsmith.json": '{"draft_kind": "eagle"}',
          "eagle/model.safetensors": safetensors_bytes()}),
    Case("GGUF export: unknown type", "scripts/export_gguf.py", ["export={draft}", "type=q2"],
         "type must be f16, q8_0 or q4_k_m"),
    # --- the second table (issue "Bad input, second table"): data that must not be lost ---
    Case("export into the run folder that holds the checkpoint, overwrite=true", X,
         ["ckpt_path={tmp}/run/checkpoints/last.ckpt", "out={tmp}/run", "overwrite=true"], "which this export reads",
         {"run/checkpoints/last.ckpt": CKPT, "run/metrics.csv": "step,loss\n1,2.0\n", "run/.hydra/config.yaml": "a: 1\n"}),
    Case("export into the checkpoints folder itself, overwrite=true", X,
         ["ckpt_path={tmp}/run/checkpoints/last.ckpt", "out={tmp}/run/checkpoints", "overwrite=true"],
         "which this export reads", {"run/checkpoints/last.ckpt": CKPT}),
    Case("export over a folder of mine (not an export), overwrite=true", X,
         ["ckpt_path={tmp}/x.ckpt", "out={tmp}/mine", "overwrite=true"], "which no export wrote",
         {"x.ckpt": CKPT, "mine/notes.txt": "my notes\n", "mine/sub/data.csv": "a\n"}),
    Case("export over another run's folder, overwrite=true", X,
         ["ckpt_path={tmp}/x.ckpt", "out={tmp}/other", "overwrite=true"], "which no export wrote",
         {"x.ckpt": CKPT, "other/checkpoints/last.ckpt": CKPT, "other/summary.json": "{}"}),
    Case("training: export.dir is the run's own folder, overwrite=true", D,
         QUICK + ["export.dir={tmp}/run", "export.overwrite=true"], "which this export reads"),
    Case("training: export.dir above the run's folder, overwrite=true", D,
         QUICK + ["export.dir={tmp}", "export.overwrite=true"], "which this export reads"),
    Case("training: export.dir over a folder of mine, overwrite=true", D,
         QUICK + ["export.dir={tmp}/mine", "export.overwrite=true"], "which no export wrote",
         {"mine/notes.txt": "my notes\n"}),
    Case("training: a second run into a live run's folder", D, QUICK, "in use by a running training run",
         {"run/checkpoints/": ""}, locked="run"),
    # --- silently wrong before ---
    Case("training: a misspelt group added with + (+domian)", D, ["+domian=medical"], "did you mean +domain=medical?"),
    Case("training: a misspelt key added with +", D, ["+trainer.max_stepz=3"], "did you mean trainer.max_steps=3?"),
    Case("speculate: a key added with + that nothing reads", S, ["drafts=[{draft}]", "+domian=medical"],
         "unknown config key 'domian'"),
    Case("prompts file: a chat whose user message is empty", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"],
         'empty "content"', {"p.jsonl": '{"messages": [{"role": "user", "content": ""}]}\n'}),
    Case("compare: a summary.json of {}", "eval/compare.py", ["runs=[{tmp}/run]", "out={tmp}/cmp"],
         'holds no "after" metrics', {"run/summary.json": "{}"}),
    Case("drafts without brackets", S, ["drafts={draft}"], "drafts must be a list"),
    # --- tracebacks before ---
    Case("prompts file: a lone surrogate escape", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"],
         "lone surrogate", {"p.jsonl": '{"prompt": "hi \\ud800 there"}\n'}),
    Case("draft whose weights' hidden size differs from its config.json", S, ["drafts=[{tmp}/odd]"],
         "do not match its config.json", {"odd/": "misshapen"}),
    Case("training: resume a checkpoint of another draft shape", D, QUICK + ["ckpt_path={tmp}/other.ckpt"],
         "holds a draft of another shape", {"other.ckpt": CKPT}),
    Case("training: ckpt_path=auto with last.ckpt cut short and nothing whole beside it", D,
         ["trainer.max_steps=1", "paths.output_dir={tmp}/run", "ckpt_path=auto"], "is cut short",
         {"run/checkpoints/last.ckpt": b"PK\x03\x04 cut short"}),
    Case("device=cuda without a GPU", S, ["drafts=[{draft}]", "device=cuda"], "CUDA GPU"),
    Case("device=tpu", S, ["drafts=[{draft}]", "device=tpu"], "device must be auto, cpu, cuda or cuda:<n>"),
    Case("dtype=float64", S, ["drafts=[{draft}]", "dtype=float64"], "dtype must be one of float32, bfloat16, float16"),
    Case("training: a layer the target does not have", D, QUICK + ["model.draft.layers=[99]"], "do not exist"),
    Case("training: no layers", D, QUICK + ["model.draft.layers=[]"], "at least one"),
    Case("training: trainer.accelerator=gpu without a GPU", D, QUICK + ["trainer.accelerator=gpu"], "no CUDA GPU"),
    Case("training: trainer.precision=bogus", D, QUICK + ["trainer.precision=bogus"], "trainer.precision must be one of"),
    Case("export: ckpt_path is the checkpoints folder", X, ["ckpt_path={tmp}/run/checkpoints", "out={tmp}/out"],
         "is a folder, not a checkpoint", {"run/checkpoints/last.ckpt": CKPT}),
    Case("acceptance: top_p out of range", A, ["drafts=[{draft}]", "top_p=1.5"], "top_p must be in (0, 1]"),
    Case("acceptance: top_k zero", A, ["drafts=[{draft}]", "top_k=0"], "top_k must be >= 1"),
    *[Case("an output that cannot be written (under /proc)", entry, args, "cannot write under /proc", files)
      for entry, args, files in (
        (S, ["drafts=[{draft}]", "out=/proc/draftsmith-out"], {}),
        (A, ["drafts=[{draft}]", "out=/proc/draftsmith-out"], {}),
        ("eval/compare.py", ["runs=[{tmp}/run]", "out=/proc/draftsmith-out"],
         {"run/summary.json": '{"after": {}, "before": {}}'}),
        (D, ["trainer.max_steps=1", "paths.output_dir=/proc/draftsmith-out"], {}),
        (X, ["ckpt_path={tmp}/x.ckpt", "out=/proc/draftsmith-out"], {"x.ckpt": CKPT}),
        (G, ["out=/proc/draftsmith-out/a.jsonl"], {}))],
    Case("generate: out is an existing folder", G, ["out={tmp}/store"], "is a folder; an answer store is one .jsonl",
         {"store/": ""}),
    # --- slow before ---
    Case("prompts file: one 50 MB line", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl", "n_prompts=2"],
         "context holds", {"p.jsonl": json.dumps({"prompt": "word " * 10_000_000}) + "\n"}, opens_model_files=True),
    # --- wording ---
    Case("prompts file: a UTF-8 byte-order mark", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"],
         "byte-order mark", {"p.jsonl": b'\xef\xbb\xbf{"prompt": "hi"}\n'}),
    Case("prompts file: a pretty-printed JSON array", S, ["drafts=[{draft}]", "prompts_file={tmp}/p.jsonl"],
         "one JSON document spread over lines", {"p.jsonl": '[\n  {"prompt": "a"},\n  {"prompt": "b"}\n]\n'}),
    Case("temperature not a number", S, ["drafts=[{draft}]", "temperature=[hot]"], "temperature must be a number"),
    # --- found by trying more (each a traceback after the models loaded, or a run that went wrong without a word) ---
    Case("training: threads=-1", D, QUICK + ["threads=-1"], "threads must be >= 1"),
    Case("training: LoRA rank zero", D, QUICK + ["lora.enabled=true", "lora.r=0"], "lora.r must be >= 1"),
    Case("training: LoRA dropout above 1", D, QUICK + ["lora.enabled=true", "lora.dropout=1.5"],
         "lora.dropout must be in [0, 1)"),
    Case("training: LoRA on layers the model lacks", D, QUICK + ["lora.enabled=true", "lora.target_modules=[nope]"],
         "are not layers of"),
    Case("training: export.dtype=int8 (after the whole run before)", D, QUICK + ["export.dtype=int8"],
         "export.dtype must be one of"),
    Case("training: trainer.accumulate_grad_batches=0 (trained anyway before)", D,
         QUICK + ["trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches must be >= 1"),
    Case("training: trainer.devices=0", D, QUICK + ["trainer.devices=0"], "trainer.devices must be auto"),
    Case("training: trainer.log_every_n_steps=0 (logged nothing before)", D, QUICK + ["trainer.log_every_n_steps=0"],
         "trainer.log_every_n_steps must be >= 1"),
    Case("training: a negative gradient clip (trained anyway before)", D, QUICK + ["trainer.gradient_clip_val=-1"],
         "trainer.gradient_clip_val must be >= 0"),
    Case("training: one Adam beta", D, QUICK + ["optim.betas=[0.9]"], "optim.betas must be two numbers"),
    Case("training: data.sources without brackets", D, QUICK + ["data=files", "data.sources={tmp}/c.jsonl"],
         "data.sources must be a list", {"c.jsonl": '{"text": "a"}\n'}),
    Case("training: seed not a number", D, QUICK + ["seed=abc"], "seed must be an integer"),
    Case("training: data.eval_batch_size=0", D, QUICK + ["data.eval_batch_size=0"], "data.eval_batch_size must be >= 1"),
    Case("training: data.num_workers=-1", D, QUICK + ["data.num_workers=-1"], "data.num_workers must be >= 0"),
    Case("training: loss.chunk_size=0", D, QUICK + ["loss.chunk_size=0"], "loss.chunk_size must be >= 1"),
    Case("training: a Trainer argument set without + (trainer.strategy)", D, QUICK + ["trainer.strategy=ddp"],
         "Fix: add it with +: +trainer.strategy=ddp"),
    Case("compare: runs without brackets", "eval/compare.py", ["runs={tmp}/run", "out={tmp}/cmp"], "runs must be a list",
         {"run/summary.json": '{"after": {}}'}),
    Case("speculate: n_prompts not a number", S, ["drafts=[{draft}]", "n_prompts=abc"], "n_prompts must be an integer"),
    Case("speculate: threads=-2", S, ["drafts=[{draft}]", "threads=-2"], "threads must be >= 1"),
    Case("speculate: a cache folder that cannot be written", S, ["drafts=[{draft}]", "cache_dir=/proc/draftsmith-cache"],
         "cache_dir: cannot write under /proc"),
    Case("generate: seed not a number", G, ["seed=abc", "out={tmp}/a.jsonl"], "seed must be an integer"),
]


def model_files(target: Path, folder: Path, kind: str) -> None:
    """A draft folder beside the target's: its config and tokenizer files with a tiny weights file; `cut` cuts the
    weights short, `foreign` renumbers two tokens of the vocabulary, `complete` leaves it valid (for preflight)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (target / name).is_file():
            shutil.copy(target / name, folder / name)
    (folder / "model.safetensors").write_bytes(safetensors_bytes(cut=kind == "cut"))
    if kind == "misshapen":  # config.json says one hidden size, the weights hold another
        config = json.loads((folder / "config.json").read_text())
        shape = [config["vocab_size"], config["hidden_size"]]
        config["hidden_size"] //= 2
        (folder / "config.json").write_text(json.dumps(config))
        header = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": shape, "data_offsets": [0, 16]}})
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 16)
    if kind == "foreign":
        data = json.loads((folder / "tokenizer.json").read_text())
        vocab = data["model"]["vocab"]
        a, b = list(vocab)[len(vocab) // 2: len(vocab) // 2 + 2]  # ordinary tokens (special ones come first)
        vocab[a], vocab[b] = vocab[b], vocab[a]
        (folder / "tokenizer.json").write_text(json.dumps(data))


def build(case: Case, tmp: Path, target: Path) -> None:
    for name, content in case.files.items():
        path = tmp / name.rstrip("/")
        if name.endswith("/"):
            if content in ("cut", "foreign", "complete", "misshapen"):
                model_files(target, path, content)
            else:
                path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            content = checkpoint_bytes() if content == CKPT else content
            path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)


def snapshot(tmp: Path) -> set[Path]:
    """Every file and folder under `tmp`, relative to it."""
    return {p.relative_to(tmp) for p in tmp.rglob("*")}


@contextlib.contextmanager
def live_lock(case: Case, tmp: Path):
    """A live process holding the lock of `case.locked` (a running training run, as the lock sees it)."""
    if not case.locked:
        yield
        return
    folder = tmp / case.locked
    folder.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(folder / ".draftsmith.lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()  # "locked"
        yield
    finally:
        holder.kill()
        holder.wait()


HOLD_LOCK = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
             "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode()); print('locked', flush=True); "
             "time.sleep(120)")


def fill(args: list[str], tmp: Path, target: str, draft: str) -> list[str]:
    return [a.replace("{tmp}", str(tmp)).replace("{target}", target).replace("{draft}", draft) for a in args]


def case_args(case: Case, tmp: Path, target: str, draft: str) -> list[str]:
    """The case's overrides, with the target named where the entry point takes one."""
    config = ENTRIES[case.entry][0]
    extra = ([f"model.target.name_or_path={target}"] if config in ("distill", "cache_teacher")
             else [f"target={target}"] if config in ("speculate", "acceptance", "bench_decoder", "generate_data")
             else [])
    return extra + fill(case.args, tmp, target, draft)


def run_case(case: Case, target_folder: Path, target: str, python: str = sys.executable) -> dict:
    """Run one case as a program; what came back."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        build(case, tmp, target_folder)
        model_files(target_folder, tmp / "draft", "complete")
        before = snapshot(tmp)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        with live_lock(case, tmp):
            started = time.perf_counter()
            try:
                run = subprocess.run([python, str(ROOT / case.entry),
                                      *case_args(case, tmp, target, str(tmp / "draft"))],
                                     capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
            except subprocess.TimeoutExpired as e:  # did not fail at all: recorded as such
                run = subprocess.CompletedProcess(e.cmd, -1, "", f"(still running after {e.timeout} s: killed)")
            seconds = time.perf_counter() - started
        leftovers, deleted = changes(case, tmp, before)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    return {"what": case.what, "entry": case.entry, "args": case.args, "exit": run.returncode,
            "message": lines[-1] if lines else "", "stderr_lines": len(lines),
            "traceback": "Traceback" in run.stderr, "seconds": round(seconds, 2),
            "limit_s": 10 if case.opens_model_files else 2, "expected": case.expect, "written": leftovers,
            "deleted": deleted}


def changes(case: Case, tmp: Path, before: set[Path]) -> tuple[list[str], list[str]]:
    """(written, deleted): what the run added to `tmp` (a live holder's lock file is the holder's) and what it
    removed of the case's own files."""
    after = snapshot(tmp) - ({Path(case.locked) / ".draftsmith.lock"} if case.locked else set())
    return sorted(map(str, after - before)), sorted(map(str, before - after))


def passed(row: dict) -> bool:
    return (row["exit"] == 2 and row["stderr_lines"] == 1 and not row["traceback"] and row["expected"] in
            row["message"] and row["seconds"] <= row["limit_s"] and not row["written"] and not row.get("deleted"))


def markdown(rows: list[dict], conditions: str) -> str:
    table = ["| entry point | bad input | exit | s | limit | message |", "|---|---|---|---|---|---|"]
    for r in rows:
        message = r["message"].replace("|", "\\|")
        table.append(f"| `{r['entry']}` | {r['what']} | {r['exit']} | {r['seconds']:.2f} | {r['limit_s']} "
                     f"| {'' if passed(r) else '**FAILS THE GOAL** '}{message} |")
    ok = sum(passed(r) for r in rows)
    return "\n".join([START, f"{ok} of {len(rows)} cases meet the goal. {conditions}", "", *table,
                      "", "<!-- generated by scripts/bad_input_table.py -->", END])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--only", default=None, help="one entry point's cases, e.g. speculate")
    ap.add_argument("--no-write", action="store_true", help="print only; docs/bad-input.md stays as it is")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from decode.models.loading import resolve
    from eval.shared.provenance import cpu_model

    target_folder = Path(resolve(args.target))  # converts an embedded target once, before any case is timed
    rows = []
    for case in CASES:
        if args.only and args.only not in case.entry:
            continue
        rows.append(run_case(case, target_folder, args.target))
        r = rows[-1]
        print(f"{'ok  ' if passed(r) else 'FAIL'} {r['seconds']:5.2f}s exit {r['exit']} {r['entry']}: {r['what']}\n"
              f"     {r['message']}", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, cwd=ROOT).stdout)
    conditions = (f"Measured {time.strftime('%Y-%m-%d')} on commit `{commit}`{' with uncommitted changes' if dirty else ''}"
                  f", CPU {cpu_model()} ({os.cpu_count()} cores), target "
                  f"`{args.target}`, wall time of the whole program (`python scripts/bad_input_table.py`).")
    block = markdown(rows, conditions)
    print(block)
    if not args.no_write and not args.only and PAGE.is_file():
        text = PAGE.read_text()
        PAGE.write_text(text[:text.index(START)] + block + text[text.index(END) + len(END):])
        print(f"wrote {PAGE.relative_to(ROOT)}")
    sys.exit(0 if all(passed(r) for r in rows) else 1)


if __name__ == "__main__":
    main()
