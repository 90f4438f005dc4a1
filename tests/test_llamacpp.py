"""llama.cpp as an engine (eval/llamacpp.py): the server process's life and its HTTP API, against a stand-in
llama-server (a small Python HTTP server with llama-server's endpoints), so no build is needed here. The real
binary is exercised by `scripts/bench_llamacpp.py` (docs/serving.md)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from eval.llamacpp import LlamaServer
from eval.shared.gguf import llamacpp_bin

FAKE = r'''#!{python}
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
open({argfile!r}, "w").write(json.dumps(args))
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers(); self.wfile.write(b"{{}}")
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = body["n_predict"]
        reply = {{"tokens": list(range(100, 100 + n)), "timings": {{"prompt_ms": 10.0 * len(body["prompt"]),
                 "predicted_ms": 20.0 * n, "draft_n": 3 * n, "draft_n_accepted": 2 * n}}}}
        if body.get("n_probs"):
            reply["completion_probabilities"] = [{{"id": 100 + i, "logprob": -0.6, "top_logprobs": [
                {{"id": 100 + i, "logprob": -0.6}}, {{"id": 7, "logprob": -0.8}}]}} for i in range(n)]
        data = json.dumps(reply).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
        self.wfile.write(data)
HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@pytest.fixture
def fake_llamacpp(tmp_path, monkeypatch):
    from eval.shared.gguf import VERSION

    bin_dir = tmp_path / "llama.cpp" / VERSION / "bin"
    bin_dir.mkdir(parents=True)
    server = bin_dir / "llama-server"
    server.write_text(FAKE.format(python=sys.executable, argfile=str(tmp_path / "args.json")))
    server.chmod(server.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path))
    return tmp_path


def test_a_missing_build_names_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="make setup-llamacpp"):
        llamacpp_bin()


def test_the_server_starts_answers_with_its_timings_and_stops(fake_llamacpp):
    log = fake_llamacpp / "server.log"
    with LlamaServer(Path("target.gguf"), draft_gguf=Path("draft.gguf"), draft_max=3, log=log) as server:
        proc = server.proc
        done = server.completion([1, 2, 3, 4], n_predict=5)
        assert done.tokens == [100, 101, 102, 103, 104]
        assert done.prefill_s == pytest.approx(0.04) and done.decode_s == pytest.approx(0.1)
        assert (done.drafted, done.accepted) == (15, 10)
    assert proc.poll() is not None  # stopped on exit
    args = json.loads((fake_llamacpp / "args.json").read_text())
    for flag, value in (("-m", "target.gguf"), ("-md", "draft.gguf"), ("--spec-type", "draft-simple"),
                        ("--spec-draft-n-max", "3"), ("--spec-draft-p-min", "0.0"), ("--host", "127.0.0.1")):
        assert args[args.index(flag) + 1] == value


def test_a_server_that_dies_while_starting_is_reported_with_its_log(fake_llamacpp):
    server = fake_llamacpp / "llama.cpp"
    bin_file = next(server.rglob("llama-server"))
    bin_file.write_text(f"#!{sys.executable}\nimport sys\nprint('error: model not found')\nsys.exit(1)\n")
    with pytest.raises(RuntimeError, match="model not found"):
        with LlamaServer(Path("missing.gguf"), log=fake_llamacpp / "s.log"):
            pass


def test_a_difference_from_plain_is_explained_with_plains_own_top_two_there(fake_llamacpp):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    try:
        import bench_llamacpp
    finally:
        sys.path.pop(0)
    base, other = [[5, 6], [8, 9, 10]], [[5, 6], [8, 7, 10]]
    rec = {"per_prompt": {"first_difference": [bench_llamacpp.first_difference(a, b) for a, b in zip(other, base)]}}
    with LlamaServer(Path("target.gguf"), log=fake_llamacpp / "server.log") as plain:
        bench_llamacpp.explain_differences(plain, [rec], [[1, 2], [3, 4]], [other], base)
    (d,) = rec["differences"]
    assert d["prompt"] == 1 and d["at"] == 1 and (d["plain_token"], d["setting_token"]) == (9, 7)
    assert d["plain_in_one_batch"] == 100 and d["top2"] == [(100, -0.6), (7, -0.8)]
    assert d["top2_logprob_gap"] == pytest.approx(0.2)


def test_bench_settings_and_records_use_llamacpp_plain_as_the_baseline():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    try:
        import bench_llamacpp
    finally:
        sys.path.pop(0)
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"drafts": ["d.gguf"], "draft_max": [2, 4], "ngram": True, "temperature": 0.0,
                            "split": "test", "ci_level": 0.95})
    servers = bench_llamacpp.settings(cfg)
    assert [s["name"] for s in servers][0] == "llama.cpp plain" and len(servers) == 4
    base = {"tokens": [[1, 2], [3, 4]], "seconds": [1.0, 1.0], "decode_s": [0.8, 0.8], "drafted": [0, 0],
            "accepted": [0, 0]}
    spec = {"tokens": [[1, 2], [3, 4]], "seconds": [0.5, 0.5], "decode_s": [0.3, 0.3], "drafted": [4, 4],
            "accepted": [3, 1]}
    r = bench_llamacpp.record(servers[1], spec, base, "code", cfg)
    assert r["engine"] == "llama.cpp" and r["speedup"] == pytest.approx(2.0) and r["accepted_per_proposed"] == pytest.approx(0.5)
    assert r["greedy_identical"] is True and r["tok_s"] == pytest.approx(4.0)

    import eval.llamacpp_costs as costs

    timed = {"target.gguf": {1: 0.04, 3: 0.08, 5: 0.15}, "d.gguf": {1: 0.01, 3: 0.02, 5: 0.03}}
    monkey = pytest.MonkeyPatch()
    monkey.setattr(costs, "pass_seconds", lambda gguf, ks, depth, *a, **k: {k_: timed[str(gguf)][k_] for k_ in ks})
    monkey.setattr(bench_llamacpp, "gguf_of", lambda ref, *a: ref)
    plain = bench_llamacpp.record(servers[0], base, base, "code", cfg)
    cfg.max_new_tokens, cfg.threads, cfg.cache_dir, cfg.gguf_type = 8, None, None, "q8_0"
    try:
        bench_llamacpp.add_cost_model(cfg, [plain, r], "target.gguf", servers[:2], [[1, 2, 3]])
    finally:
        monkey.undo()
    # 1 + 2 x 0.5 = 2 tokens a step; a step costs the 3-token verify pass (80 ms), the draft's re-run of those 3
    # tokens (20 ms) and 2 draft passes of 10 ms: 2 x 40 / 120
    expected = 2 * 0.040 / 0.120
    assert r["hardware_expected_speedup"] == pytest.approx(expected) and r["decode_speedup"] == pytest.approx(0.8 / 0.3)
    assert r["llamacpp_costs"]["draft_pass_s"] == {1: 0.01, 3: 0.02, 5: 0.03}
    assert r["llamacpp_costs"]["depth"] == 3 + 4 and r["cost_model_error"] == pytest.approx(expected / (0.8 / 0.3) - 1)


def test_llamacpp_arms_run_in_speculate_s_interleaved_run_over_llamacpp_plain(fake_llamacpp, tmp_path, tiny_target_dir,
                                                                             tiny_draft_dir):
    """eval/speculate.py llamacpp=[plain,speculative,ngram]: one server each beside our arms, each prompt to every arm
    in turn; llama.cpp rows are over llama.cpp plain and carry their engine; our verdicts ignore them."""
    import shutil

    from test_eval import eval_cfg

    from eval.speculate import evaluate

    draft = tmp_path / "draft"
    shutil.copytree(tiny_draft_dir, draft)
    (draft / "draft-q8_0.gguf").write_bytes(b"GGUF")  # converted before: reused, not converted again
    (tmp_path / "t.gguf").write_bytes(b"GGUF")
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [draft], "gamma=[2]", "domains=[code]",
                                "llamacpp=[speculative,ngram]", f"llamacpp_target={tmp_path / 't.gguf'}",
                                f"cache_dir={fake_llamacpp}"))
    engines = [r for r in records if r["engine"] == "llama.cpp"]
    assert [r["proposer"] for r in engines] == ["llama.cpp plain", "llama.cpp draft", "llama.cpp ngram"]
    assert all(r["speedup_over"] == "llama.cpp plain" and r["greedy_identical"] is True for r in engines)
    assert engines[1]["gamma"] == 2 and engines[1]["accepted_per_proposed"] == pytest.approx(2 / 3)
    assert engines[0]["speedup"] == 1.0 and {r["engine"] for r in records} == {"draftsmith", "llama.cpp"}
    args = json.loads((fake_llamacpp / "args.json").read_text())  # the last server started: n-gram drafting
    assert args[args.index("--spec-type") + 1] == "ngram-simple"
    saved = json.loads((tmp_path / "eval" / "results.json").read_text().replace("NaN", "null"))
    assert saved["conditions"]["llamacpp"] and len(saved["records"]) == len(records)


CONVERTER = r'''import json, sys
args = sys.argv[1:]
open({argfile!r}, "w").write(json.dumps(args))
open(args[args.index("--outfile") + 1], "wb").write(b"GGUF")
'''


def test_gguf_export_of_a_standalone_and_of_an_eagle3_draft_and_what_llamacpp_cannot_serve(fake_llamacpp):
    """Standalone exports convert as they are and draft with draft-simple; an EAGLE-3 export (speculators layout)
    converts with its target's folder and drafts with draft-eagle3; Medusa has no llama.cpp form: a usage error."""
    from eval.shared.gguf import VERSION, export_gguf, spec_type_of
    from eval.shared.preflight import UsageError

    root = fake_llamacpp / "llama.cpp" / VERSION
    argfile = fake_llamacpp / "convert-args.json"
    (root / "convert_hf_to_gguf.py").write_text(CONVERTER.format(argfile=str(argfile)))
    target = fake_llamacpp / "target"
    target.mkdir()
    (target / "config.json").write_text("{}")
    plain, eagle3, medusa = (fake_llamacpp / n for n in ("plain", "eagle3", "medusa"))
    for folder, kind in ((plain, None), (eagle3, "eagle3"), (medusa, "medusa")):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(
            {"speculators_config": {"verifier": {"name_or_path": str(target)}}} if kind == "eagle3" else {}))
        if kind:
            (folder / "draftsmith.json").write_text(json.dumps({"draft_kind": kind}))
    assert spec_type_of("x.gguf") == "draft-simple" and spec_type_of(str(plain)) == "draft-simple"
    assert spec_type_of(str(eagle3)) == "draft-eagle3"
    with pytest.raises(UsageError, match="standalone models and eagle3 drafts only"):
        spec_type_of(str(medusa))
    out = export_gguf(plain, kind="f16")
    assert out == plain / "draft-f16.gguf" and out.read_bytes() == b"GGUF"
    assert "--target-model-dir" not in json.loads(argfile.read_text())
    export_gguf(eagle3, kind="q8_0")
    args = json.loads(argfile.read_text())
    assert args[args.index("--target-model-dir") + 1] == str(target) and (eagle3 / "draft-q8_0.gguf").is_file()


def test_the_card_serves_the_draft_in_llamacpp_at_its_best_measured_length(tmp_path):
    """A card without llama.cpp measurements gives the llama-server command at our decoder's gamma and says so; once
    scripts/bench_llamacpp.py update_card=true has run, at llama.cpp's best measured draft length, with the figure.
    An EAGLE-3 card drafts with draft-eagle3."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    try:
        import bench_llamacpp
    finally:
        sys.path.pop(0)
    from omegaconf import OmegaConf

    from eval.shared.card import render

    before = render({"target": "t", "evaluations": [{"gamma": 3, "speedup": 1.5, "alpha": 0.6, "tau": 2.0}]}, "x")
    assert "--spec-type draft-simple" in before and "--spec-draft-n-max 3" in before
    assert "not in llama.cpp" in before
    (tmp_path / "draftsmith.json").write_text(json.dumps({"target": "t"}))
    rec = {"draft": str(tmp_path), "domain": "code", "greedy_identical": True, "accepted_per_proposed": 0.9,
           "proposer": "draft-simple", "speedup_ci": [0.5, 0.7]}
    records = [{"draft": "none", "proposer": "plain", "domain": "code", "tok_s": 27.0},
               {**rec, "gamma": 1, "speedup": 0.62, "tok_s": 16.7}, {**rec, "gamma": 2, "speedup": 0.55, "tok_s": 14.9}]
    conditions = {"target_gguf": "t.gguf", "cpu": "a CPU", "threads": 2, "engine": "llama.cpp"}
    bench_llamacpp.update_cards(records, conditions, OmegaConf.create({"gguf_type": "q8_0"}))
    card = (tmp_path / "README.md").read_text()
    assert "--spec-draft-n-max 1" in card and "0.62x llama.cpp plain" in card and "16.7 against 27.0" in card
    assert "did not pay there" in card
    assert len(json.loads((tmp_path / "draftsmith.json").read_text())["llamacpp"]) == 2
    assert "--spec-type draft-eagle3" in render({"draft_kind": "eagle3", "target": "t", "evaluations": []}, "x")
    assert "llama-server" not in render({"draft_kind": "medusa", "target": "t", "evaluations": []}, "x")
