"""Turn a Draftsmith checkpoint into a plain Hugging Face folder (safetensors, config, tokenizer,
generation config) that `AutoModelForCausalLM.from_pretrained` and serving engines load as is."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch

from data.atomic import temp_dir
from data.checks import UsageError
from data.owned import INFO, check_replaceable
from data.token_ranking import write_ranking
from decode.drafts.feature_drafts import is_feature_draft
from decode.drafts.kinds import FEATURE_KINDS, kind_of_draft
from decode.drafts.feature_export import feature_draft_from_config
from decode.drafts.feature_export import write_feature_weights
from eval.shared.card import write_card

log = logging.getLogger("draftsmith.export")

CHECKPOINT_KEY = "draftsmith"  # the entry a Draftsmith checkpoint carries besides Lightning's own
_META = CHECKPOINT_KEY


def consolidate_deepspeed(path: Path) -> Path:
    """trainer=deepspeed writes last.ckpt as a folder of ZeRO shards; Lightning's converter joins them into one
    fp32 checkpoint file (<folder>.consolidated, rewritten when the folder is newer), which export reads."""
    out = path.with_name(path.name + ".consolidated")
    if out.is_file() and out.stat().st_mtime >= max(p.stat().st_mtime for p in path.rglob("*")):
        return out
    try:
        from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict
        import deepspeed  # noqa: F401 - the converter needs it; fail here with the fix
    except ImportError as err:
        raise RuntimeError(f"{path} is a DeepSpeed (ZeRO) checkpoint folder; joining its shards needs DeepSpeed. "
                           "Fix: pip install --no-build-isolation deepspeed==0.19.8 (docs/scaling.md).") from err
    convert_zero_checkpoint_to_fp32_state_dict(str(path), str(out))
    return out


def read_checkpoint(path: str | os.PathLike) -> dict:
    path = Path(path)
    if path.is_dir() and (path / "latest").is_file():  # a DeepSpeed checkpoint folder
        path = consolidate_deepspeed(path)
    if not path.is_file():
        raise FileNotFoundError(f"No checkpoint at {path}. Fix: point ckpt_path to a .ckpt file "
                                f"(runs write <output_dir>/checkpoints/last.ckpt).")
    try:
        # Our own file: it holds plain Python values (config dicts, tokenizer bytes) besides tensors.
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - truncated zip, pickle errors... all mean the same to a user
        raise RuntimeError(f"Checkpoint {path} is corrupted or truncated ({type(err).__name__}: {err}). "
                           "Fix: use another checkpoint, e.g. last.ckpt or the best one in the same folder.") from err
    if _META not in ckpt:
        raise ValueError(f"{path} was not written by Draftsmith (no '{_META}' entry): cannot export it.")
    return ckpt


def draft_from_checkpoint(ckpt: dict):
    """Rebuild the draft model (eval mode) from a checkpoint dict."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    meta = ckpt[_META]
    config_dict = dict(meta["draft_config"])
    state = {k[len("draft."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("draft.")}
    if config_dict.get("draft_kind") in FEATURE_KINDS:  # Medusa heads / EAGLE-style draft (decode/drafts/feature_drafts.py)
        model = feature_draft_from_config(config_dict)
        model.load_state_dict(state, strict=True)
        return model.eval()
    config = AutoConfig.for_model(config_dict.pop("model_type"), **config_dict)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if meta.get("lora"):  # LoRA-trained: rebuild the adapters, load, then merge them into plain weights
        from eval.shared.lora import add_lora, merge_lora

        model = add_lora(model, meta["lora"])
        model.load_state_dict(state, strict=True)
        model = merge_lora(model)
    else:
        model.load_state_dict(state, strict=True)
    if meta.get("generation_config"):
        model.generation_config = GenerationConfig.from_dict(meta["generation_config"])
    return model.eval()


def write_hf_folder(model, tokenizer_files: dict[str, bytes], out_dir: str | os.PathLike, *,
                    overwrite: bool = False, info: dict | None = None, dtype: str | None = None,
                    draft_vocab: dict | None = None, head: torch.Tensor | None = None,
                    kept: torch.Tensor | None = None, protected=()) -> Path:
    """Write model + tokenizer files into `out_dir` atomically (a temp folder renamed into place); `draft_vocab`
    (size, from, ranking: model.draft.train_vocab_from) goes in as draft_vocab.json. `head`: the target's LM head
    weight, which an EAGLE-3 export cuts to the `kept` ids (None: all). draftsmith.json lists the files written
    ("export_files"): `overwrite` replaces only such a folder, never one holding a `protected` path (the checkpoint,
    the run) or anything else (data/owned.py)."""
    out = Path(out_dir)
    old = out.with_name(f".{out.name}.old")
    if old.is_dir() and not out.exists():  # a kill between the two renames below: the previous export comes back
        os.replace(old, out)
        log.warning("%s: restored the previous export, moved aside by an interrupted overwrite", out)
    if out.exists() and not overwrite:
        raise UsageError(f"Export folder {out} already exists. Fix: choose another export.dir, "
                         "or pass export.overwrite=true to replace it.")
    check_replaceable(out, "export folder", protected)
    tmp = temp_dir(out.parent, out.name)
    try:
        if is_feature_draft(model):  # the serving layout (decode/drafts/feature_export.py); some kinds store their cut head
            info = {**(info or {}), "draft_kind": model.draft_kind, "draft_config": model.config_dict()}
            write_feature_weights(model, tmp, str(info.get("target")), info.get("target_architectures") or (),
                                  dtype=dtype, head=head, kept=kept)
        else:
            if dtype:
                model = model.to(getattr(torch, dtype))
            model.save_pretrained(tmp, safe_serialization=True)
        for name, blob in tokenizer_files.items():
            (tmp / name).write_bytes(blob)
        (tmp / "draftsmith.json").write_text(json.dumps(info or {}, indent=2, default=str))
        if draft_vocab:  # trained over ranked ids: decoding keeps the same (data/token_ranking.py)
            write_ranking(tmp, draft_vocab["ranking"], draft_vocab["size"], draft_vocab["from"])
        write_card(tmp, name=out.name)  # README.md model card, rendered from draftsmith.json
        written = json.loads((tmp / INFO).read_text())
        written["export_files"] = sorted(p.name for p in tmp.iterdir())  # what overwrite may replace later
        (tmp / INFO).write_text(json.dumps(written, indent=2, default=str))
        if out.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _export_kept_ids(vocab_size: int, meta: dict):
    """An EAGLE-3 export's draft vocabulary: the ids training scored and decoding keeps (decode/drafts/draft_vocab.py
    `kept_ids` over the saved ranking and special ids; a checkpoint that saved none: the end-of-sequence ids), or
    None (every id) for a draft trained over the full vocabulary."""
    draft_vocab = meta.get("draft_vocab")
    if not draft_vocab:
        return None
    from decode.drafts.draft_vocab import kept_ids

    keep = draft_vocab.get("special_ids")
    if keep is None:
        eos = (meta.get("generation_config") or {}).get("eos_token_id")
        keep = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    return kept_ids(vocab_size, int(draft_vocab["size"]), keep, draft_vocab.get("ranking"))


def _target_head(meta: dict) -> torch.Tensor:
    """The LM head weight of the target a checkpoint was trained against (loaded for an EAGLE-3 export)."""
    from decode.models.loading import load_frozen

    cache_dir = ((meta.get("config") or {}).get("paths") or {}).get("cache_dir")
    target = load_frozen(meta["target"], dtype="float32", **({"cache_dir": cache_dir} if cache_dir else {}))
    return target.get_output_embeddings().weight.detach()


def export_checkpoint(ckpt_path: str | os.PathLike, out_dir: str | os.PathLike, overwrite: bool = False,
                      dtype: str | None = None, extra_info: dict | None = None,
                      head: torch.Tensor | None = None, protected=()) -> Path:
    """The checkpoint's draft as an export folder. A kind that stores a head (EAGLE-3, Medusa) copies `head`, the
    target's LM head weight (None: loaded from the target the checkpoint names), EAGLE-3's cut to its draft
    vocabulary. Never replaces a folder holding the checkpoint or a `protected` path (the run folder)."""
    check_replaceable(out_dir, "export folder", [ckpt_path, *protected], overwrite)
    ckpt = read_checkpoint(ckpt_path)
    meta = ckpt[_META]
    model = draft_from_checkpoint(ckpt)
    kept = None
    if is_feature_draft(model) and kind_of_draft(model).stores_head:
        head = head.detach() if head is not None else _target_head(meta)
        kept = _export_kept_ids(head.shape[0], meta) if kind_of_draft(model).head_ids == "draft_vocab" else None
    else:
        head = None
    cfg = meta.get("config") or {}
    training = {"loss": (cfg.get("loss") or {}).get("name"), "data": (cfg.get("data") or {}).get("name"),
                "steps": ckpt.get("global_step"), "lora": bool(meta.get("lora"))}
    info = {"checkpoint": str(Path(ckpt_path).resolve()), "target": meta.get("target"),
            "target_architectures": meta.get("target_architectures"), "run_name": meta.get("run_name"),
            "global_step": ckpt.get("global_step"), "training": training, **(extra_info or {})}
    return write_hf_folder(model, meta.get("tokenizer_files", {}), out_dir, overwrite=overwrite, info=info,
                           dtype=dtype, draft_vocab=meta.get("draft_vocab"), head=head, kept=kept,
                           protected=[ckpt_path, *protected])


def tokenizer_files(tokenizer) -> dict[str, bytes]:
    """The files `save_pretrained` writes for a tokenizer, as bytes (stored inside checkpoints)."""
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}
