"""What a training checkpoint says about itself, read without torch: whether it is whole, which draft it holds.

A torch checkpoint is a zip archive whose `data.pkl` holds the plain values (Draftsmith's meta under "draftsmith":
the run's config) beside references to tensor storages. Reading that pickle with every torch class stubbed out
takes milliseconds and loads no weights, so a resume of another draft shape, or a checkpoint cut short, is refused
before a model is built (train/checks.py).

    meta = checkpoint_meta(path)      # {"config": {...}, "target": ..., ...} or None
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

from data.checks import UsageError

# the settings that decide a draft's parameter shapes: a checkpoint trained with other values cannot be resumed
SHAPE_KEYS = {"model.target.name_or_path": ("model", "target", "name_or_path"),
              **{f"model.draft.{k}": ("model", "draft", k) for k in
                 ("kind", "layers", "source", "name_or_path", "config", "num_heads", "num_layers", "aux_layers",
                  "train_vocab")},
              "lora.enabled": ("lora", "enabled"), "lora.r": ("lora", "r"),
              "lora.target_modules": ("lora", "target_modules")}


class _Stub:
    """Stands for any class or function the pickle names outside the standard library (tensors, Lightning types)."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Stub()

    def __setstate__(self, state):
        pass


class _MetaUnpickler(pickle.Unpickler):
    SAFE = {"builtins", "collections", "copyreg", "datetime", "pathlib"}

    def find_class(self, module, name):
        if module.split(".")[0] in self.SAFE:
            return super().find_class(module, name)
        return _Stub

    def persistent_load(self, pid):  # a tensor's storage: not read
        return None


def is_complete(path) -> bool:
    """A non-empty zip archive with its central directory (a checkpoint cut short has none)."""
    path = Path(str(path))
    return path.is_file() and path.stat().st_size > 0 and zipfile.is_zipfile(path)


def checkpoint_meta(path) -> dict | None:
    """The "draftsmith" entry of a checkpoint (None when it has none or cannot be read)."""
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if name is None:
                return None
            with archive.open(name) as f:
                data = _MetaUnpickler(f).load()
    except Exception:  # noqa: BLE001 - a damaged or foreign archive: nothing to say about it
        return None
    meta = data.get("draftsmith") if isinstance(data, dict) else None
    return meta if isinstance(meta, dict) else None


MISSING = object()


def setting(config: dict, path: tuple[str, ...]):
    """The value at `path`, MISSING where the config has no such key."""
    for key in path:
        if not isinstance(config, dict) or key not in config:
            return MISSING
        config = config[key]
    return config


def shape_differences(saved: dict, current: dict) -> list[str]:
    """`key=saved (this run: current)` for each shape-deciding setting the saved config has and the current one
    sets otherwise."""
    return [f"{key}={setting(saved, path)!r} (this run: {setting(current, path)!r})"
            for key, path in SHAPE_KEYS.items()
            if setting(saved, path) is not MISSING and setting(saved, path) != setting(current, path)]


def newest_complete(folder) -> Path | None:
    """The newest whole .ckpt file in a checkpoints folder, None if there is none."""
    folder = Path(str(folder))
    found = [p for p in folder.glob("*.ckpt") if is_complete(p)] if folder.is_dir() else []
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def auto_resume(output_dir) -> Path | None:
    """ckpt_path=auto: <output_dir>/checkpoints/last.ckpt, or the newest whole checkpoint beside it when a kill or a
    full disk cut last.ckpt short (None: nothing to resume); refused, naming the file, when none is whole."""
    last = Path(str(output_dir)).expanduser() / "checkpoints" / "last.ckpt"
    if not last.exists() or is_complete(last):
        return last if last.exists() else None
    whole = newest_complete(last.parent)
    if whole is None:
        raise UsageError(f"ckpt_path=auto: {last} is cut short and no whole checkpoint is beside it (a kill or a full "
                         "disk while it was written). Fix: ckpt_path=null to start afresh in another paths.output_dir, "
                         "or remove that file.")
    return whole
