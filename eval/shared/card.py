"""The model card (README.md) of an exported draft: what it is, what was measured, how to serve it.

Measurements live in the export's draftsmith.json under "evaluations" (appended by training and by
eval/speculate.py); the card is rendered from that file, so it never shows a number that was not measured.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from decode.drafts.kinds import KINDS, STANDALONE, VLLM_REFUSES
from decode.proposers.registry import PROPOSERS


def _layout(e: dict) -> str:
    """The CPU matmul layout the decoder used (decode/kernels/fast_linear.py), whether the draft ran with int8 weights
    (decode/drafts/quantize.py) or a head over part of the vocabulary (decode/drafts/draft_vocab.py) and whether passes were
    compiled (decode/kernels/compiled.py), where recorded."""
    which = "the" if e.get("draft_vocab_order") == "frequency" else "the first"
    most = f" most frequent in the domain's text ({e.get('draft_vocab_ranked_by') or 'draft_vocab_from'})" \
        if which == "the" else ""
    extras = (f", draft head over {which} {e['draft_vocab']} token ids{most}" if e.get("draft_vocab") else "") + (
        ", compiled passes on static caches" if e.get("compiled") else "")
    if "cuda" in str(e.get("device")):
        return extras
    return (f", cpu_matmul={e['cpu_matmul']}" if e.get("cpu_matmul") else "") + (
        f", draft weights {_weights(e)} while decoding" if _weights(e) else "") + extras


def _weights(e: dict) -> str | None:
    """int8 / int4 draft weights while decoding (older cards recorded only draft_int8)."""
    return e.get("draft_weights") or ("int8" if e.get("draft_int8") else None)


def _gamma(e: dict) -> str:
    """The gamma column: gamma, or the longest draft and the confidence below which drafting stopped."""
    threshold = e.get("confidence_threshold") or 0
    return f"<= {e.get('gamma')}, stop < {threshold:g}" if threshold else str(e.get("gamma"))


def _interval(e: dict) -> str:
    ci = e.get("speedup_ci")
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""


def _row(e: dict) -> str:
    return (f"| {e.get('domain', '?')} | {_gamma(e)} | {e.get('temperature')} | {e['alpha']:.3f} | {e['tau']:.2f} | "
            f"{e['speedup']:.2f}x{_interval(e)} | {e.get('n_prompts')} {e.get('split', '')}{' ' if e.get('split') else ''}"
            f"prompts x {e.get('max_new_tokens')} new tokens, "
            f"{e.get('threads')} threads, {e.get('device', 'cpu')}{_layout(e)}; {e.get('source', '')} |")


def _how(training: dict) -> str:
    if not training.get("loss"):
        return ""
    source = ("cross-entropy on the data's tokens, no target logits" if training["loss"] == "cross_entropy"
              else f"distillation from the target's logits ({training['loss']})")
    lora = ", LoRA adapters merged" if training.get("lora") else ""
    return f": {source} on `{training.get('data')}`, {training.get('steps')} steps{lora}"


def best_by_domain(evals: list[dict]) -> dict[str, dict]:
    """Per domain, the measurement with the highest speedup (domains in the order first measured)."""
    best: dict[str, dict] = {}
    for e in evals:
        domain = e.get("domain", "?")
        if domain not in best or e["speedup"] > best[domain]["speedup"]:
            best[domain] = e
    return best


def losing_domains(evals: list[dict]) -> str:
    """A sentence naming the domains where no measured setting beat the target alone ('' when every domain paid, or
    when none did: serving_gamma says that), with what to do instead."""
    best = best_by_domain(evals)
    slower = {d: e["speedup"] for d, e in best.items() if e["speedup"] < 1}
    if not slower or len(slower) == len(best):
        return ""
    listed = ", ".join(f"{d} (best {s:.2f}x)" for d, s in slower.items())
    return (f" On {listed} prompts no measured setting beat the target alone: serve those without this draft, or "
            "distill a draft on that domain (`python train/distill.py +domain=<domain>`).")


def serving_gamma(evals: list[dict]) -> tuple[int, float, str]:
    """The gamma and confidence threshold the usage snippets use, and the sentence that says where they come from:
    the measured evaluation with the best speedup, else 4 and no threshold, said to be a starting point and not a
    measurement."""
    if not evals:
        return 4, 0.0, ("The snippets draft 4 tokens per step, a common starting point, not a measurement: "
                        "`python eval/speculate.py drafts=[<this folder>] gamma=auto update_card=true` measures the "
                        "best gamma on your hardware and writes it here.")
    best = max(evals, key=lambda e: e["speedup"])
    gamma, threshold = int(best["gamma"]), float(best.get("confidence_threshold") or 0.0)
    stop = (f", stopping early after a token the draft gives probability < {threshold:g} (transformers' "
            "assistant_confidence_threshold; the vLLM and SGLang snippets draft gamma tokens every step)" if threshold else "")
    return gamma, threshold, (
        f"The snippets draft {'up to ' if threshold else ''}{gamma} token{'s' if gamma > 1 else ''} per step "
        f"(gamma = {gamma}{stop}): the best measured speedup above ({best['speedup']:.2f}x; "
        f"{best.get('domain', '?')}, temperature {best.get('temperature')}, {best.get('device', 'cpu')}). The best "
        "gamma grows with alpha and with how cheap a draft step is next to a target pass: measure it where you serve."
        + ("" if best["speedup"] >= 1 else " No measurement above pays: on that hardware this draft made "
           "decoding slower than the target alone.") + losing_domains(evals))


def serving_target_of(target: str) -> tuple[str, str]:
    """(the model id the serving snippets load, a caveat sentence or ''). An embedded target was measured as its
    quantized GGUF dequantized to fp32; serving engines load the original weights from the Hub, which are not the
    weights measured, so the card says so."""
    from decode.models.embedded import PREFIX, REGISTRY

    spec = REGISTRY.get(target[len(PREFIX):]) if target.startswith(PREFIX) else None
    if spec is None or not spec.hub_original:
        return target, ""
    return spec.hub_original, (
        f"The measurements above were made against `{target}`: {spec.describe()} "
        f"(sha256 `{spec.sha256[:16]}...`), dequantized to float32. The snippets load the original "
        f"weights, `{spec.hub_original}`, which are NOT the weights measured: acceptance and speedup with them may "
        "differ. Measure against your serving target: `python eval/speculate.py target=<it> drafts=[<this folder>]`.")


def _provenance_lines(evals: list[dict], weights_sha256: str | None) -> list[str]:
    """What each measurement ran on: commit (and a dirty tree), machine, versions, the target's exact weights."""
    seen, lines = set(), []
    for e in evals:
        prov = e.get("provenance") or {}
        if not prov:
            continue
        tw = prov.get("target_weights") or {}
        weights = (f"target weights sha256 `{tw['sha256'][:16]}...` ({tw.get('name')})" if tw.get("sha256") else
                   f"target weights sha256 `{tw['weights_sha256'][:16]}...`" if tw.get("weights_sha256") else
                   f"target `{tw.get('name')}`" if tw.get("name") else None)
        line = "; ".join(x for x in (
            f"commit `{str(prov.get('commit'))[:12]}`" + (" with uncommitted changes" if prov.get("dirty") else "")
            if prov.get("commit") else None, prov.get("cpu_model"), prov.get("gpu"),
            f"torch {prov.get('torch')}, transformers {prov.get('transformers')}" if prov.get("torch") else None,
            weights) if x)
        if line not in seen:
            seen.add(line)
            lines.append(f"- {e.get('source', 'measured')}: {line}")
    if weights_sha256:
        lines.append(f"- this folder's weights: sha256 `{weights_sha256[:16]}...`")
    return ["", "Provenance:", ""] + lines if lines else []


def render(info: dict, name: str) -> str:
    target = info.get("target") or "<target>"
    serving_target, caveat = serving_target_of(str(target))
    evals = info.get("evaluations") or []
    gamma, threshold, why = serving_gamma(evals)
    lines = [f"# {info.get('run_name') or name}: a speculative-decoding draft for `{target}`", "",
             f"Trained with Draftsmith{_how(info.get('training') or {})}. "
             "It shares the target's tokenizer and vocabulary; use it only as a draft (assistant) for that target.", ""]
    val = info.get("val") or {}
    if val:
        lines += ["## Teacher-forced validation (held-out text)", "",
                  f"top-1 agreement {val.get('val/top1_agree', float('nan')):.3f}, "
                  f"E[accept] = mean sum_v min(p, q) {val.get('val/expected_accept', float('nan')):.3f}, "
                  f"KL(target || draft) {val.get('val/kl', float('nan')):.3f}.", ""]
    lines += ["## Measured speculative decoding", ""]
    if evals:
        lines += ["alpha = accepted / (accepted + rejected); tau = tokens per target call, bonus token included; "
                  "speedup = tokens/s vs target-only decoding with the same decoder, same prompts (in brackets: its 95% "
                  "interval across prompts, where measured). `test` prompts were never used for any choice "
                  "(data/prompts.py).", "",
                  "| domain | gamma | temperature | alpha | tau | speedup | conditions |", "|---|---|---|---|---|---|---|"]
        lines += [_row(e) for e in evals]
    else:
        lines += ["Not measured yet: run `python eval/speculate.py drafts=[<this folder>] update_card=true`."]
    lines += _provenance_lines(evals, info.get("weights_sha256"))
    lines += _batch_lines(info.get("batches") or [])
    lines += _policy_lines(info.get("serving_policy"))
    if info.get("draft_kind") in KINDS:
        kind = KINDS[info["draft_kind"]]
        lines += _feature_usage(kind, gamma, why, caveat, serving_target, str(target), info)
        if kind.llamacpp_spec:  # llama.cpp drafts with this kind too
            lines += _llamacpp_lines(info, gamma, kind.llamacpp_spec)
        return "\n".join(lines)
    lines += ["", "## Usage", "", why] + (["", caveat] if caveat else []) + ["", "transformers (assisted generation):",
              "", "```python",
              "from transformers import AutoModelForCausalLM, AutoTokenizer",
              f'target = AutoModelForCausalLM.from_pretrained("{serving_target}")',
              'draft = AutoModelForCausalLM.from_pretrained("<path to this folder>")',
              f"draft.generation_config.num_assistant_tokens = {gamma}"
              + ("  # already this folder's default (generation_config.json)" if evals else ""),
              'draft.generation_config.num_assistant_tokens_schedule = "constant"',
              f"draft.generation_config.assistant_confidence_threshold = {threshold:g}"
              + ("  # stop drafting when unsure" if threshold else "  # transformers' default 0.4 stops drafts early"),
              f'tok = AutoTokenizer.from_pretrained("{serving_target}")',
              'inputs = tok.apply_chat_template([{"role": "user", "content": "Hello"}], add_generation_prompt=True,',
              '                                 return_tensors="pt", return_dict=True)',
              "out = target.generate(**inputs, assistant_model=draft, max_new_tokens=128)", "```", "",
              ] + _vllm_lines(info, gamma, STANDALONE.vllm_method, serving_target) + [
              "SGLang:", "", "```bash",
              f"python -m sglang.launch_server --model-path {serving_target} \\",
              "  --speculative-algorithm STANDALONE --speculative-draft-model-path <path to this folder> \\",
              f"  --speculative-num-steps {gamma} --speculative-eagle-topk 1 --speculative-num-draft-tokens {gamma + 1}",
              "```", ""] + _llamacpp_lines(info, gamma)
    return "\n".join(lines)


def _batch_lines(batches: list[dict]) -> list[str]:
    """Where speculation with this draft stops paying as the batch grows (eval/batches.py): per domain, temperature
    and gamma, the batch sizes up to the first whose measured interval reaches 1, then the speedup at each."""
    if not batches:
        return []
    lines = ["", "## Batch sizes", "",
             "Serving several requests at once turns each pass compute-bound, so speculation's gain shrinks with the "
             "batch. Measured (`eval/speculate.py batch_size=[...]`, speedup over target-only decoding at the same "
             f"batch size, {batches[0].get('device', 'cpu')}, {batches[0].get('threads', '?')} threads):", ""]
    series = {}
    for b in batches:
        series.setdefault((b["domain"], b["temperature"], b["gamma"]), []).append(b)
    for (domain, t, gamma), rows in series.items():
        rows = sorted(rows, key=lambda b: b["batch_size"])
        stops = next((b["batch_size"] for b in rows if b["speedup_ci"][0] <= 1), None)  # the first that does not pay
        paying = [b["batch_size"] for b in rows if stops is None or b["batch_size"] < stops]
        verdict = (f"pays up to batch {max(paying)}" if paying else "pays at no batch size measured")
        each = ", ".join(f"{b['batch_size']}: {b['speedup']:.2f}x [{b['speedup_ci'][0]:.2f}, {b['speedup_ci'][1]:.2f}]"
                         for b in rows)
        lines.append(f"- {domain}, T={t:g}, gamma={gamma}: {verdict}"
                     + (f", stops paying at batch {stops}" if stops and paying else "") + f" ({each}).")
    return lines + [""]


def _vllm_lines(info: dict, gamma: int, method: str, serving_target: str) -> list[str]:
    """vLLM: `vllm serve` with this draft. The draft length: the best one measured in vLLM against vLLM plain
    (`scripts/bench_vllm.py update_card=true`), else the card's gamma, said to be ours."""
    best = max(info.get("vllm") or [], key=lambda e: e["speedup"], default=None)
    if best:
        n = int(best["gamma"])
        ours = f" (our decoder: {best['ours_alpha']:.3f})" if best.get("ours_alpha") is not None else ""
        said = (f"Measured in vLLM ({best.get('engine', 'vLLM')}, {best.get('domain', '?')} test prompts, greedy, "
                f"{best.get('cpu', 'this CPU')}): {best['speedup']:.2f}x vLLM plain at {n} drafted tokens "
                f"({best['tok_s']:.1f} against {best['plain_tok_s']:.1f} tok/s), α {best['alpha']:.3f}{ours}, output "
                f"identical to plain: {best.get('greedy_identical')}."
                + ("" if best["speedup"] >= 1 else " It did not pay there: serve vLLM plain on that machine."))
    else:
        n = gamma
        said = ("Not measured in vLLM for this card; the draft length is the one measured best in Draftsmith's "
                "decoder. `python scripts/bench_vllm.py drafts=[<path to this folder>] update_card=true` measures it "
                "against vLLM plain and writes it here.")
    spec = f'{{"method": "{method}", "model": "<path to this folder>", "num_speculative_tokens": {n}}}'
    return ["vLLM:", "", said, "", "```bash", f"vllm serve {serving_target} --speculative-config '{spec}'", "```", ""]


def _llamacpp_lines(info: dict, gamma: int, spec_type: str = "draft-simple") -> list[str]:
    """llama.cpp: convert, then llama-server with this draft. The draft length: the best one measured in llama.cpp
    against llama.cpp plain (`scripts/bench_llamacpp.py update_card=true`), else the card's gamma, said to be ours."""
    best = max(info.get("llamacpp") or [], key=lambda e: e["speedup"], default=None)
    if best:
        n = int(best["draft_max"])
        said = (f"Measured in llama.cpp ({best.get('target_gguf', 'the target GGUF')}, {best.get('gguf_type', '')} "
                f"draft, {best.get('domain', '?')} test prompts, greedy, {best.get('cpu', 'this CPU')}): "
                f"{best['speedup']:.2f}x llama.cpp plain at {n} drafted tokens ({best['tok_s']:.1f} against "
                f"{best['plain_tok_s']:.1f} tok/s), output identical to plain: {best.get('greedy_identical')}."
                + ("" if best["speedup"] >= 1 else " It did not pay there: serve llama.cpp plain on that machine."))
    else:
        n = gamma
        said = ("The draft length is the one measured best in Draftsmith's decoder, not in llama.cpp, whose verify "
                "pass costs more per token on CPUs: `python scripts/bench_llamacpp.py drafts=[<this folder>] "
                "draft_max=[1,2,4] update_card=true` measures it against llama.cpp plain and writes it here.")
    return ["llama.cpp (GGUF; needs `make setup-llamacpp` in Draftsmith):", "", said, "", "```bash",
            "python scripts/export_gguf.py export=<path to this folder> type=q8_0   # -> draft-q8_0.gguf",
            f"llama-server -m <target>.gguf -md <path to this folder>/draft-q8_0.gguf --spec-type {spec_type} \\",
            f"  --spec-draft-n-max {n} --spec-draft-p-min 0", "```", ""]


def _feature_usage(kind, gamma: int, why: str, caveat: str, serving_target: str, target: str,
                   info: dict | None = None) -> list[str]:
    """Usage of a feature draft: it needs the target's hidden states, so transformers' assisted generation cannot run
    it; Draftsmith's decoder and serving engines' own methods can."""
    head = "its head over the draft vocabulary is" if kind.head_ids == "draft_vocab" else "its LM head is"
    shared = (f"embeddings (not stored here; {head} a copy of the target's rows)"
              if kind.stores_head else "embeddings and LM head (not stored here)")
    lines = ["", "## Usage", "", f"This folder holds {kind.summary}. It reads the target's hidden states and shares its "
             f"{shared}, so it runs only next to that exact target, and transformers' `assistant_model` cannot run "
             "it.", "", why] + (["", caveat] if caveat else [])
    lines += ["", "Draftsmith's decoder (the one measured above):", "", "```bash",
              f"python eval/speculate.py target={target} drafts=[<path to this folder>] gamma=[{gamma}]",
              "```", ""] + (_vllm_lines(info or {}, gamma, kind.vllm_method, serving_target) if kind.vllm_method
                             else ["vLLM: not served (" + VLLM_REFUSES[kind.name] + ").", ""])
    if kind.sglang:
        lines += [f"SGLang ({kind.sglang}; not run here):", "", "```bash",
                  f"python -m sglang.launch_server --model-path {serving_target} \\",
                  f"  --speculative-algorithm {kind.sglang} --speculative-draft-model-path <path to this folder> \\",
                  f"  --speculative-num-steps {gamma} --speculative-eagle-topk 1 --speculative-num-draft-tokens {gamma + 1}",
                  "```", ""]
    return lines


POLICY_NAMES = {**{name: kind.summary for name, kind in PROPOSERS.items()}, "none": "no draft: the target alone"}


def _policy_lines(policy: dict | None) -> list[str]:
    """The card's section on the decoding policy `eval/speculate.py policy=auto` chose for this draft."""
    if not policy:
        return []
    cand = policy["candidate"]
    what = POLICY_NAMES.get(policy["proposer"], policy["proposer"])
    lines = ["", "## Serving policy (chosen by `eval/speculate.py policy=auto`)", "",
             f"**{what}**" + ("" if policy["proposer"] == "none" else
                              f" (proposer `{cand['proposer']}`, γ {cand['gamma']}"
                              + (f", stop below confidence {float(cand['confidence_threshold']):g}"
                                 if float(cand["confidence_threshold"] or 0) else "") + ")")
             + (", with auto-off (no draft while it does not pay)" if policy.get("auto_off") else "")
             + f", chosen among {policy['tune_policies']} policies on the tune prompts (geometric mean speedup "
             f"{policy['tune_speedup_geomean']:.2f}x over the domains) for `{policy['target']}` on "
             f"{policy['device']} with {policy['threads']} threads. On the test prompts ({policy['n_prompts']} per "
             f"domain, {policy['max_new_tokens']} new tokens), {POLICY_NAMES.get(cand['proposer'], cand['proposer'])}:",
             "", "| domain | T | α | τ | speedup [95% interval] |", "|---|---|---|---|---|"]
    for t in policy["test"]:
        lo, hi = t["speedup_ci"]
        alpha = "–" if t["alpha"] != t["alpha"] else f"{t['alpha']:.3f}"
        lines.append(f"| {t['domain']} | {t['temperature']:g} | {alpha} | {t['tau']:.2f} "
                     f"| {t['speedup']:.2f}x [{lo:.2f}, {hi:.2f}] |")
    if policy.get("settings") is not None:
        lines += ["", f"Settings: `{json.dumps(policy['settings'])}`."]
    lines += ["", "Draftsmith's decoder (`decode/`) runs every policy; `generation_config.json` holds it as "
              "`draftsmith_policy`. transformers' assisted generation runs only chains (proposers draft and "
              "heuristic), vLLM and SGLang their own methods: the snippets below use the chain settings."]
    return lines


def write_policy(export_dir: str | os.PathLike, policy: dict) -> Path:
    """Record the chosen serving policy in draftsmith.json (`serving_policy`) and generation_config.json
    (`draftsmith_policy`; for chains transformers runs, write_card also sets its assisted-generation keys to it), and
    re-render the card. Atomic writes."""
    folder = Path(export_dir)
    info_path = folder / "draftsmith.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info["serving_policy"] = policy
    tmp = info_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info, indent=2, default=str))
    os.replace(tmp, info_path)
    path = folder / "generation_config.json"
    if path.is_file():
        config = json.loads(path.read_text())
        config["draftsmith_policy"] = {k: policy.get(k) for k in ("proposer", "gamma", "confidence_threshold",
                                                                   "auto_off", "settings")}
        tmp = folder / ".generation_config.json.tmp"
        tmp.write_text(json.dumps(config, indent=2) + "\n")
        os.replace(tmp, path)
    return write_card(folder)


def set_assistant_gamma(folder: Path, gamma: int, threshold: float = 0.0, schedule: str = "constant") -> None:
    """Make transformers' assisted generation draft as measured with this folder as it is: its generation_config.json
    gets num_assistant_tokens = gamma, a constant schedule and assistant_confidence_threshold = threshold
    (transformers' own defaults for an assistant: 20 tokens, stopping after one it gives probability < 0.4). vLLM
    and SGLang take gamma from their own flags (the card's snippets)."""
    path = folder / "generation_config.json"
    if not path.is_file():  # a folder without one takes its generation defaults from config.json: leave it so
        return
    config = json.loads(path.read_text())
    config.update(num_assistant_tokens=gamma, num_assistant_tokens_schedule=schedule,
                  assistant_confidence_threshold=threshold)
    tmp = folder / ".generation_config.json.tmp"
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(tmp, path)


def write_card(export_dir: str | os.PathLike, new_evaluations: list[dict] | None = None,
               name: str | None = None, llamacpp: list[dict] | None = None, batches: list[dict] | None = None,
               vllm: list[dict] | None = None) -> Path:
    """Append evaluations to draftsmith.json (if given) and re-render README.md, each atomically.
    `name` titles the card when draftsmith.json has no run_name (default: the folder's name). Once something is
    measured, the folder's generation_config.json drafts the card's gamma too (set_assistant_gamma)."""
    folder = Path(export_dir)
    info_path = folder / "draftsmith.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    if new_evaluations:
        info["evaluations"] = (info.get("evaluations") or []) + list(new_evaluations)
    if llamacpp:  # measurements in llama.cpp (scripts/bench_llamacpp.py update_card=true): the latest run's
        info["llamacpp"] = list(llamacpp)
    if vllm:  # measurements in vLLM (scripts/bench_vllm.py update_card=true): the latest run's
        info["vllm"] = list(vllm)
    if batches:  # speculation against batch size (eval/speculate.py batch_size=[...] update_card=true): the latest
        info["batches"] = list(batches)
    if new_evaluations or llamacpp or batches or vllm:
        tmp = info_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(info, indent=2, default=str))
        os.replace(tmp, info_path)
    policy = info.get("serving_policy") or {}
    if info.get("draft_kind") in KINDS:  # no assisted-generation keys: transformers cannot run it
        pass
    elif policy.get("proposer") in ("draft", "heuristic") and str(policy.get("gamma")).isdigit():  # chosen for it
        set_assistant_gamma(folder, int(policy["gamma"]), float(policy.get("confidence_threshold") or 0.0),
                            "constant" if policy["proposer"] == "draft" else "heuristic")
    elif info.get("evaluations"):
        gamma, threshold, _ = serving_gamma(info["evaluations"])
        set_assistant_gamma(folder, gamma, threshold)
    from eval.shared.provenance import weights_hash

    card = folder / "README.md"
    tmp = folder / ".README.md.tmp"
    tmp.write_text(render({**info, "weights_sha256": weights_hash(folder)}, name or folder.name))
    os.replace(tmp, card)
    return card
