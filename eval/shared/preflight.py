"""Entry points fail in seconds on bad input: one line naming the input and the fix, exit status 2, no traceback.

Every entry script calls `preflight(<its config name>, <its check>)` at the very top, before its heavy imports
(torch, transformers, Lightning): the config is composed from the command line with Hydra's compose API, and the
check reads only config values and small files (JSON configs, tokenizer files, safetensors headers, prompt files),
never model weights. Later, `usage_errors()` around the run turns a `UsageError` found on the way (a store written
with other settings, a prompt longer than the context) into the same one-line exit.

    preflight("speculate", check_speculate)      # at the top of eval/speculate.py
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import struct
import sys
from pathlib import Path

from data.checks import UsageError
from decode.drafts.kinds import feature_kind_of

EXIT_USAGE = 2
CONF = Path(__file__).resolve().parents[2] / "conf"
HYDRA_FLAGS = ("-h", "--help", "--hydra-help", "-c", "--cfg", "-i", "--info", "-m", "--multirun", "-p", "--package",
               "--resolve", "--shell-completion", "-sc", "--version", "--config-path", "-cp", "--config-name", "-cn",
               "--config-dir", "-cd", "--experimental-rerun")
# decode/'s own error for drafts of another vocabulary (decode/ does not import data/checks.py)
USAGE_ERROR_NAMES = ("UsageError", "VocabMismatchError", "ModelNotFoundError")


def fail(message: str) -> None:
    """Print `message` as one line on stderr and exit with status 2."""
    line = " ".join(str(message).split())
    print(f"error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_USAGE)


def hydra_message(ex: Exception) -> str:
    """A Hydra or OmegaConf composition error as one line with its fix."""
    text = str(ex)
    missing = re.search(r"Could not find '([\w/]+)/([^']+)'", text)
    if missing:
        group, name = missing.groups()
        options = re.findall(r"^\t(\S+)$", text.split("Available options", 1)[-1].split("Config search path")[0], re.M)
        return (f"unknown {group} '{name}'. Fix: one of {', '.join(options) or '(none)'} "
                f"(conf/{group}/<name>.yaml)" + (f", as +{group}=<name>" if group in ("domain", "experiment") else "")
                + ".")
    key = re.search(r"Could not override '([^']+)'", text)
    if key:
        return (f"unknown config key '{key.group(1)}'. Fix: check its spelling (--cfg job prints every key), or "
                f"+{key.group(1)}=... to add a new one.")
    mandatory = re.search(r"Missing mandatory value: ([\w.]+)", text)
    if mandatory:
        return f"{mandatory.group(1)} is required. Fix: add {mandatory.group(1)}=... to the command."
    first = text.strip().splitlines()[0] if text.strip() else type(ex).__name__
    if type(ex).__name__ == "OverrideParseException":
        return f"cannot parse the command's overrides: {first}. Fix: key=value pairs; quote lists, e.g. 'drafts=[a,b]'."
    return first


@contextlib.contextmanager
def usage_errors(broad: bool = False):
    """Turn a usage error raised inside into one line and exit 2. `broad` (config checks): any ValueError,
    KeyError or OSError counts too, as well as Hydra's and OmegaConf's errors."""
    try:
        yield
    except Exception as ex:  # noqa: BLE001 (sorted below: what is not a usage error goes on up)
        if isinstance(ex, OSError) and ex.errno == errno.ENOSPC:
            fail(f"the disk is full ({getattr(ex, 'filename', None) or ex}). Fix: free space (or point out= / "
                 "paths.cache_dir elsewhere) and rerun: finished parts are kept, interrupted ones resume.")
        names = {c.__name__ for c in type(ex).__mro__}
        hydra = bool(names & {"HydraException", "OmegaConfBaseException"})
        if broad and isinstance(ex, TypeError):  # a config value of the wrong type met a comparison
            fail(f"a config value has the wrong type ({ex}). Fix: check the values on the command line (numbers "
                 "unquoted, lists in brackets); --cfg job prints the composed config.")
        if names & set(USAGE_ERROR_NAMES) or (broad and (hydra or isinstance(ex, (ValueError, KeyError, OSError)))):
            fail(hydra_message(ex) if hydra else ex.args[0] if isinstance(ex, KeyError) and ex.args else str(ex))
        raise


def compose(config_name: str, overrides: list[str]):
    """The config an entry point would get from these command-line overrides (Hydra's compose API)."""
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose(config_name, overrides=overrides)


def preflight(config_name: str, check=None, argv: list[str] | None = None):
    """Compose `config_name` from the command line and run `check(cfg)`: a problem ends the program at once (one
    line, exit 2). Hydra's own flags (--help, --cfg, -m, ...) are left to Hydra. Returns the config (None when
    skipped)."""
    argv = sys.argv[1:] if argv is None else argv
    if any(a.split("=")[0] in HYDRA_FLAGS for a in argv):
        return None
    with usage_errors(broad=True):
        try:
            cfg = compose(config_name, argv)
        except Exception as ex:  # noqa: BLE001 - a misspelt key gets its closest known one named, the rest goes on
            key = re.search(r"Could not override '([^']+)'", str(ex))
            if key:
                unknown_key(config_name, argv, key.group(1), plus=False)
            raise
        check_added_keys(config_name, argv)
        check_common(cfg)
        if check is not None:
            check(cfg)
        return cfg


def check_common(cfg) -> None:
    """Keys most entry points share: threads, seed and the cache folder (converted models, tokenized data)."""
    from data.checks import number_in, writable_dir

    if cfg.get("threads") is not None:
        number_in(cfg.threads, "threads", 1, integer=True)
    if "seed" in cfg:
        number_in(cfg.seed, "seed", 0, integer=True)
    cache = cfg.get("cache_dir") or (cfg.get("paths") or {}).get("cache_dir")
    if cache:
        writable_dir(cache, "cache_dir" if cfg.get("cache_dir") else "paths.cache_dir")


# lightning.Trainer's arguments a run may add as +trainer.<name>=... (conf/trainer/default.yaml); the others
# (callbacks, logger, plugins, default_root_dir, enable_progress_bar) the run sets itself
TRAINER_ARGS = ("accelerator", "accumulate_grad_batches", "barebones", "benchmark", "check_val_every_n_epoch",
                "detect_anomaly", "deterministic", "devices", "enable_autolog_hparams", "enable_checkpointing",
                "enable_model_summary", "fast_dev_run", "gradient_clip_algorithm", "gradient_clip_val",
                "inference_mode", "limit_predict_batches", "limit_test_batches", "limit_train_batches",
                "limit_val_batches", "log_every_n_steps", "max_epochs", "max_steps", "max_time", "min_epochs",
                "min_steps", "model_registry", "num_nodes", "num_sanity_val_steps", "overfit_batches", "precision",
                "profiler", "reload_dataloaders_every_n_epochs", "strategy", "sync_batchnorm",
                "use_distributed_sampler", "val_check_interval")


def config_groups() -> list[str]:
    """The config groups under conf/ (domain, experiment, model/draft, ...), as a `+group=option` names them."""
    return sorted(str(p.relative_to(CONF)) for p in CONF.rglob("*") if p.is_dir() and any(p.glob("*.yaml")))


def dotted_keys(node, prefix: str = "") -> list[str]:
    from omegaconf import DictConfig

    keys = []
    for key in node.keys() if isinstance(node, DictConfig) else []:
        path = f"{prefix}{key}"
        keys.append(path)
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            keys += dotted_keys(child, path + ".")
    return keys


def unknown_key(config_name: str, argv: list[str], key: str, plus: bool) -> None:
    """Refuse an override of a key the config does not have, naming the closest known key or group."""
    import difflib

    rest = [a for a in argv if a.lstrip("+~").split("=")[0] != key]
    try:
        known = dotted_keys(compose(config_name, rest))
    except Exception:  # noqa: BLE001 - another problem on the line: it is reported on its own
        known = []
    groups = config_groups()
    value = next((a.split("=", 1)[1] for a in argv if a.lstrip("+~").split("=")[0] == key and "=" in a), "...")
    close = difflib.get_close_matches(key, known + groups, n=1, cutoff=0.6)
    if not plus and key.startswith("trainer.") and key.split(".", 1)[1] in TRAINER_ARGS:
        raise UsageError(f"trainer.{key.split('.', 1)[1]} is a Lightning Trainer argument the config does not set. "
                         f"Fix: add it with +: +{key}={value}")
    hint = (f"did you mean +{close[0]}={value}?" if close and close[0] in groups else
            f"did you mean {close[0]}={value}?" if close else "check its spelling (--cfg job prints every key)")
    raise UsageError(f"unknown config key '{key}'{' (added with +)' if plus else ''}: no setting reads it, so it "
                     f"would change nothing. Fix: {hint}")


def check_added_keys(config_name: str, argv: list[str]) -> None:
    """`+key=value` adds a key the config lacks, which nothing reads (`+domian=medical` would train on the default
    domain): refused, except config groups (`+domain=medical`) and Lightning Trainer arguments (`+trainer.<arg>`)."""
    groups = set(config_groups())
    for arg in argv:
        if not arg.startswith("+") or "=" not in arg:
            continue
        key = arg.lstrip("+").split("=", 1)[0]
        if "@" in key or key in groups:
            continue
        if key.startswith("trainer.") and key.split(".", 1)[1] in TRAINER_ARGS:
            continue
        unknown_key(config_name, argv, key, plus=True)


# --- devices and number formats this machine can use ---------------------------------------------------------

DTYPES = ("float32", "bfloat16", "float16")
# lightning.Trainer's precision values (lightning.fabric.utilities.types._PRECISION_INPUT)
PRECISIONS = ("transformer-engine", "transformer-engine-float16", "16-true", "16-mixed", "bf16-true", "bf16-mixed",
              "32-true", "64-true", "64", "32", "16", "bf16")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu", "xla", "hpu")


def gpu_count() -> int:
    """CUDA (or ROCm) GPUs torch can use; without a GPU device file torch is not even imported (a second saved)."""
    if not (list(Path("/dev").glob("nvidia[0-9]*")) or Path("/dev/kfd").exists()):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_dtype(value, key: str) -> None:
    if value not in DTYPES:
        raise UsageError(f"{key} must be one of {', '.join(DTYPES)}, got {value!r}.")


def check_device(value, key: str = "device") -> None:
    """auto, cpu, cuda or cuda:<n>, and a GPU only where this machine has it."""
    device = str(value)
    if device in ("auto", "cpu"):
        return
    if not re.fullmatch(r"cuda(:\d+)?", device):
        raise UsageError(f"{key} must be auto, cpu, cuda or cuda:<n>, got {device!r}.")
    n = gpu_count()
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= n:
        raise UsageError(f"{key}={device}, but torch sees {n or 'no'} CUDA GPU{'s' if n != 1 else ''} here. Fix: "
                         f"{key}=auto (a GPU where there is one, else the CPU) or {key}=cpu.")


def check_trainer_device(trainer) -> None:
    """trainer.accelerator and trainer.precision: values Lightning knows, on hardware this machine has."""
    accelerator = str(trainer.get("accelerator", "auto"))
    if accelerator not in ACCELERATORS:
        raise UsageError(f"trainer.accelerator must be one of {', '.join(ACCELERATORS)}, got {accelerator!r}.")
    if accelerator in ("gpu", "cuda") and gpu_count() == 0:
        raise UsageError(f"trainer.accelerator={accelerator}, but torch sees no CUDA GPU here. Fix: "
                         "trainer.accelerator=auto (or cpu), or trainer=gpu on a machine with one.")
    if accelerator in ("mps", "tpu", "xla", "hpu"):
        raise UsageError(f"trainer.accelerator={accelerator} is not supported by Draftsmith's runs (tested: cpu and "
                         "CUDA GPUs). Fix: trainer.accelerator=auto.")
    precision = str(trainer.get("precision", "32-true"))
    if precision not in PRECISIONS:
        raise UsageError(f"trainer.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")


# --- model folders, read without loading weights -----------------------------------------------------------------

WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def check_safetensors(path: Path, what: str) -> dict:
    """A safetensors file whose header parses and whose tensors all fit in the file (a copy cut short fails); its
    header (tensor name -> dtype, shape, offsets)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise UsageError(f"{what}: {path} is cut short ({size} bytes). Fix: export or copy it again.")
        n = struct.unpack("<Q", head)[0]
        if n > size - 8 or n > 100_000_000:
            raise UsageError(f"{what}: {path} is not a safetensors file or is cut short. Fix: export or copy it again.")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise UsageError(f"{what}: {path} has a damaged header. Fix: export or copy it again.") from None
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        raise UsageError(f"{what}: {path} is cut short ({size} bytes, its tensors need {8 + n + end}). Fix: export "
                         "or copy it again (an interrupted copy or a full disk leaves this).")
    return header


def check_weights_match_config(folder: Path, header: dict, what: str) -> None:
    """The weights' shapes are the ones config.json describes: the embedding is [vocab_size, hidden_size] and the
    decoder layers number num_hidden_layers (a config edited or copied from another model fails here, not as a
    traceback deep in loading)."""
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    config = config.get("text_config", config) if isinstance(config, dict) else {}
    hidden, vocab, layers = (config.get(k) for k in ("hidden_size", "vocab_size", "num_hidden_layers"))
    for name, t in header.items():
        if name.endswith("embed_tokens.weight") and hidden and vocab and list(t.get("shape", [])) != [vocab, hidden]:
            raise UsageError(f"{what}: {folder}'s weights do not match its config.json: {name} is "
                             f"{t.get('shape')}, config.json says [vocab_size={vocab}, hidden_size={hidden}]. Fix: "
                             "export it again (config.json and weights must come from the same model).")
    found = {int(m.group(1)) for name in header for m in [re.search(r"\.layers\.(\d+)\.", name)] if m}
    if layers and found and max(found) + 1 != layers:
        raise UsageError(f"{what}: {folder}'s weights hold {max(found) + 1} decoder layers, its config.json says "
                         f"num_hidden_layers={layers}. Fix: export it again (config.json and weights must come from "
                         "the same model).")


def check_model_folder(folder: Path, what: str) -> None:
    """A Hugging Face folder (config.json and complete weights) or a Draftsmith feature draft (draftsmith.json with
    its draft_kind, and model.safetensors)."""
    info = folder / "draftsmith.json"
    if info.is_file():
        try:
            json.loads(info.read_text())
        except json.JSONDecodeError:
            raise UsageError(f"{what}: {info} is not valid JSON (an interrupted write?). Fix: export it again.") from None
    feature = feature_kind_of(folder) is not None
    if not feature and not (folder / "config.json").is_file():
        raise UsageError(f"{what}: {folder} has no config.json: not an exported model folder. Fix: pass the export "
                         "folder train/distill.py printed (<run>/export), or a Hugging Face model folder.")
    weights = [folder / w for w in WEIGHTS if (folder / w).is_file()]
    if not weights:
        raise UsageError(f"{what}: {folder} holds no weights ({' or '.join(WEIGHTS[:2])}). Fix: export it again "
                         "(scripts/export_draft.py).")
    header = {}
    if weights[0].name == "model.safetensors":
        header = check_safetensors(weights[0], what)
    elif weights[0].name.endswith(".index.json"):
        shards = set(json.loads(weights[0].read_text()).get("weight_map", {}).values())
        gone = sorted(s for s in shards if not (folder / s).is_file())
        if gone:
            raise UsageError(f"{what}: {folder} lacks weight shards {', '.join(gone[:3])}. Fix: copy the whole folder.")
        for shard in sorted(shards):
            if shard.endswith(".safetensors"):
                header.update(check_safetensors(folder / shard, what))
    if not feature:
        check_weights_match_config(folder, header, what)


def weight_names(folder: Path) -> list[str]:
    """The tensor names of a model folder's safetensors weights (headers only), [] without any."""
    files = [folder / "model.safetensors"] if (folder / "model.safetensors").is_file() else []
    index = folder / "model.safetensors.index.json"
    if not files and index.is_file():
        files = [folder / s for s in sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))]
    names = []
    for file in files:
        try:
            with open(file, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                names += [k for k in json.loads(f.read(n)) if k != "__metadata__"]
        except (OSError, ValueError, struct.error):
            return []
    return names


def hub_resolves(timeout: float = 3.0) -> bool:
    """Whether the Hub's name resolves (a DNS look-up, no connection), waited on for at most `timeout` seconds: an
    offline machine answers at once, where loading a Hub id would retry for a minute."""
    import socket
    import threading

    answer: list[bool] = []

    def look_up() -> None:
        try:
            socket.getaddrinfo("huggingface.co", 443)
            answer.append(True)
        except OSError:
            answer.append(False)

    thread = threading.Thread(target=look_up, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answer and answer[0])


def hub_like(ref: str) -> bool:
    """`org/name` that is not a local path: a Hugging Face Hub id (`outputs/x`, whose first part is a local folder,
    is a local path that does not exist)."""
    return (ref.count("/") == 1 and not ref.startswith((".", "/", "~")) and not Path(ref).exists()
            and not Path(ref.split("/")[0]).is_dir())


def model_folder(ref, what: str, cache_dir=None) -> Path | None:
    """Check a model reference without loading it; its local folder when there is one to read (an embedded model
    already converted, a local folder), else None (an embedded model converted on first use, a Hub id)."""
    ref = str(ref)
    if ref.startswith("embedded:"):
        from decode.models.embedded import REGISTRY, default_cache_dir, locate_parts

        key = ref[len("embedded:"):]
        if key not in REGISTRY:
            raise UsageError(f"{what}: unknown embedded model '{key}'. Fix: one of "
                             f"{', '.join('embedded:' + k for k in sorted(REGISTRY))}, a local folder or a Hub id.")
        folder = Path(cache_dir or default_cache_dir()) / "models" / key
        if (folder / "draftsmith-converted.txt").is_file():
            return folder
        try:
            locate_parts(REGISTRY[key])
        except FileNotFoundError as e:
            raise UsageError(f"{what}: {e}") from None
        return None
    if hub_like(ref):
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(ref, "config.json"), str):
            return None  # in the local Hugging Face cache
        why = ("HF_HUB_OFFLINE=1 is set" if os.environ.get("HF_HUB_OFFLINE") == "1" else
               None if hub_resolves() else "huggingface.co does not resolve from here (no network)")
        if why:
            raise UsageError(f"{what}: '{ref}' is no local folder and not in the Hugging Face cache, and {why}. "
                             "Fix: the path of a local model folder, or download the model first.")
        return None
    folder = Path(ref).expanduser()
    if not folder.exists():
        raise UsageError(f"{what}: {folder} does not exist. Fix: check the path (relative to {Path.cwd()}), e.g. "
                         "outputs/distill/<run>/export.")
    if not folder.is_dir():
        raise UsageError(f"{what}: {folder} is a file; a model is a folder (config.json + weights). Fix: name its "
                         "folder.")
    check_model_folder(folder, what)
    return folder


def vocabulary(folder: Path) -> dict | None:
    """The token -> id map of a folder's tokenizer.json (its model vocabulary and added tokens), None without one."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = dict(data.get("model", {}).get("vocab") or {})
    if isinstance(data.get("model", {}).get("vocab"), list):  # unigram: [token, score] pairs
        vocab = {tok: i for i, (tok, _) in enumerate(data["model"]["vocab"])}
    vocab.update({t["content"]: t["id"] for t in data.get("added_tokens", [])})
    return vocab


def check_same_vocabulary(target: Path | None, draft: Path | None, target_name: str, draft_name: str) -> None:
    """Target and draft folders name the same tokens with the same ids (tokenizer.json) and, where both say, the
    same embedding size (config.json): what speculative decoding compares. Skipped where a side has no folder yet
    (checked again when the models load)."""
    if target is None or draft is None or not (draft / "config.json").is_file():
        return  # feature drafts read the target's own embeddings and head
    tv, dv = vocabulary(target), vocabulary(draft)
    if tv is not None and dv is not None and tv != dv:
        raise UsageError(f"draft {draft_name} does not share the target's vocabulary (tokenizers differ: "
                         f"{len(dv)} tokens vs the target's {len(tv)}). Fix: a draft from the target's family, or one "
                         "built from it (model/draft=truncated or fresh).")
    sizes = []
    for folder in (target, draft):
        config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
        sizes.append(config.get("vocab_size") or config.get("text_config", {}).get("vocab_size"))
    if None not in sizes and sizes[0] != sizes[1]:
        raise UsageError(f"draft {draft_name} has embeddings for {sizes[1]} ids, the target {target_name} for "
                         f"{sizes[0]}. Fix: a draft from the target's family (same vocabulary).")
