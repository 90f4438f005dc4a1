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
CONF = Path(__file__).resolve().parents[1] / "conf"
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
        cfg = compose(config_name, argv)
        if check is not None:
            check(cfg)
        return cfg


# --- model folders, read without loading weights -----------------------------------------------------------------

WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def check_safetensors(path: Path, what: str) -> None:
    """A safetensors file whose header parses and whose tensors all fit in the file (a copy cut short fails)."""
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
    if weights[0].name == "model.safetensors":
        check_safetensors(weights[0], what)
    elif weights[0].name.endswith(".index.json"):
        shards = set(json.loads(weights[0].read_text()).get("weight_map", {}).values())
        gone = sorted(s for s in shards if not (folder / s).is_file())
        if gone:
            raise UsageError(f"{what}: {folder} lacks weight shards {', '.join(gone[:3])}. Fix: copy the whole folder.")
        for shard in sorted(shards):
            if shard.endswith(".safetensors"):
                check_safetensors(folder / shard, what)


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
