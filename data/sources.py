"""Where documents come from: built-in corpora, local text/JSONL/parquet files, or Hub datasets.

A source yields examples: a plain string (text), or a list of chat messages [{"role", "content"}, ...]. A chat whose
first user turn is an evaluation prompt (data/prompts.py) is dropped: evaluation stays held out of training even
when an old answer store or a user's file contains one.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
from itertools import islice
from pathlib import Path
from typing import Iterator, Union

from data.corpora import CORPORA

log = logging.getLogger("draftsmith.data")
Example = Union[str, list]
_BUILDERS = {".txt": "text", ".text": "text", ".md": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def _expand(paths) -> list[str]:
    files: list[str] = []
    for pattern in [paths] if isinstance(paths, str) else list(paths):
        matched = sorted(glob.glob(str(Path(pattern).expanduser())))
        if not matched:
            raise FileNotFoundError(f"data source: no file matches '{pattern}'. Fix the path in data.sources[].path.")
        files += matched
    return files


def _load_files(paths) -> "datasets.Dataset":
    import datasets

    files = _expand(paths)
    suffixes = {Path(f).suffix.lower() for f in files}
    builders = {_BUILDERS.get(s) for s in suffixes}
    if None in builders or len(builders) != 1:
        raise ValueError(f"data source files must all be one of {sorted(_BUILDERS)} (text, JSON lines or parquet); "
                         f"got suffixes {sorted(suffixes)}.")
    return datasets.load_dataset(builders.pop(), data_files=files, split="train")


def _load_hub(name: str, config: str | None, split: str) -> "datasets.Dataset":
    import datasets

    try:
        return datasets.load_dataset(name, config, split=split)
    except Exception as err:  # noqa: BLE001 - datasets raises many kinds; one clear message for all
        raise RuntimeError(f"Could not load Hub dataset '{name}' (config={config}, split={split}): {err}\n"
                           "Fix: check the name and network, or download it and use kind=files.") from err


def _records(ds, source: dict) -> Iterator[Example]:
    fmt = source.get("format", "text")
    if fmt == "text":
        field = source.get("text_field", "text")
        if field not in ds.column_names:
            raise KeyError(f"data source has no text field '{field}'; its columns are {ds.column_names}. "
                           f"Fix: set text_field to one of them.")
        for text in ds[field]:
            if isinstance(text, str) and text.strip():
                yield text
    elif fmt == "chat":
        messages = source.get("messages_field", "messages")
        prompt, response = source.get("prompt_field", "prompt"), source.get("response_field", "response")
        if messages in ds.column_names:
            for conv in ds[messages]:
                yield list(conv)
        elif prompt in ds.column_names and response in ds.column_names:
            for p, r in zip(ds[prompt], ds[response]):
                yield [{"role": "user", "content": p}, {"role": "assistant", "content": r}]
        else:
            raise KeyError(f"chat data needs a '{messages}' column or '{prompt}' and '{response}' columns; "
                           f"found {ds.column_names}.")
    else:
        raise ValueError(f"data source format must be text or chat, got '{fmt}'.")


def without_evaluation_prompts(examples, source: dict) -> Iterator[Example]:
    """Chat examples whose first user turn is an evaluation prompt of any built-in domain are skipped (logged)."""
    from data.prompts import reserved_prompts

    reserved, dropped = None, 0
    for example in examples:
        if isinstance(example, list):
            reserved = reserved_prompts() if reserved is None else reserved
            first = next((m.get("content") for m in example if m.get("role") == "user"), None)
            if first in reserved:
                dropped += 1
                continue
        yield example
    if dropped:
        log.warning("data source %s: skipped %d chats that ask an evaluation prompt (held out of training).",
                    describe(source), dropped)


def iter_source(source: dict) -> Iterator[Example]:
    """A source's examples; `max_records: N` keeps its first N (an answer store shared by recipes that read different
    numbers of its answers, in the order they were generated)."""
    limit = source.get("max_records")
    if limit is not None and int(limit) < 1:
        raise ValueError(f"data source {describe(source)}: max_records must be >= 1 or null, got {limit}.")
    examples = _iter_source(source)
    yield from without_evaluation_prompts(examples if limit is None else islice(examples, int(limit)), source)


def _iter_source(source: dict) -> Iterator[Example]:
    kind = source.get("kind", "builtin")
    if kind == "builtin":
        name = source.get("name")
        if name not in CORPORA:
            raise ValueError(f"Unknown built-in corpus '{name}'. Choose one of: {', '.join(sorted(CORPORA))}.")
        yield from CORPORA[name]()
    elif kind == "files":
        yield from _records(_load_files(source["path"]), source)
    elif kind == "hub":
        yield from _records(_load_hub(source["name"], source.get("config"), source.get("split", "train")), source)
    else:
        raise ValueError(f"data source kind must be builtin, files or hub, got '{kind}'.")


def content_stamp(source: dict) -> list | None:
    """What a files source holds now, for cache keys: (path, bytes, sha256) of each file it matches, so answers
    appended to a store (or an edited file) make a new cache entry instead of reusing stale blocks, while a copied or
    touched file keeps its caches (a teacher cache can take an hour). Hashing reads the files once per run (about
    1 GB/s). None for built-in and Hub sources (named by version), or files not there yet (reading them fails with
    the fix)."""
    if source.get("kind", "builtin") != "files":
        return None
    try:
        files = _expand(source.get("path"))
    except (FileNotFoundError, TypeError):
        return None
    stamps = []
    for name in files:
        digest = hashlib.sha256()
        with open(name, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        stamps.append((name, os.path.getsize(name), digest.hexdigest()))
    return stamps


def describe(source: dict) -> str:
    kind = source.get("kind", "builtin")
    return {"builtin": f"builtin:{source.get('name')}", "files": f"files:{source.get('path')}",
            "hub": f"hub:{source.get('name')}"}.get(kind, kind)
