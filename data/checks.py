"""Input files checked before anything expensive: every problem named with its file, its line and the fix.

Entry points (eval/shared/preflight.py) call these before a model loads; the readers in data/ use them too, so a file
that passes here is a file they can read. Plain Python only (no torch): a check must answer in well under a second.

    rows = read_jsonl("prompts.jsonl", "prompts_file")       # UsageError("prompts.jsonl line 2: not valid JSON ...")
    check_prompt_rows(rows, "prompts.jsonl")
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
import zipfile
from pathlib import Path


FULL_CHECK_BYTES = 64 << 20  # data files up to this size are checked line by line in full
CHECKED_LINES = 10_000       # larger ones on their first lines


class UsageError(ValueError):
    """Bad input from the user (a config value, a file, a path): the entry point prints its one-line message and
    exits with status 2, without a traceback (eval/shared/preflight.py)."""


def existing_file(path, what: str) -> Path:
    """`path` as a Path, refused unless it is a readable, non-empty file."""
    file = Path(str(path)).expanduser()
    if not file.exists():
        raise UsageError(f"{what}: {file} does not exist. Fix: check the path (relative paths start from the "
                         f"current folder, {Path.cwd()}).")
    if file.is_dir():
        raise UsageError(f"{what}: {file} is a folder, not a file. Fix: name the file inside it.")
    if not os.access(file, os.R_OK):
        raise UsageError(f"{what}: {file} is not readable. Fix: check its permissions.")
    if file.stat().st_size == 0:
        raise UsageError(f"{what}: {file} is empty. Fix: give a file with content.")
    return file


def read_lines(path, what: str, limit: int | None = None) -> list[tuple[int, str]]:
    """(line number, text) of every non-blank line of a UTF-8 text file (the first `limit` ones when given); a byte
    that is not UTF-8 is named by line."""
    file = existing_file(path, what)
    lines = []
    with open(file, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UsageError(f"{what}: {file} line {number} is not UTF-8 text (byte {e.start + 1}: "
                                 f"{raw[e.start:e.start + 1]!r}). Fix: save the file as UTF-8.") from None
            if text.strip():
                lines.append((number, text))
            if limit is not None and len(lines) >= limit:
                break
    if not lines:
        raise UsageError(f"{what}: {file} has only blank lines. Fix: give one JSON object per line.")
    return lines


def read_jsonl(path, what: str, limit: int | None = None) -> list[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSONL file (the first `limit`), each one JSON object."""
    rows = []
    for number, text in read_lines(path, what, limit):
        if text.startswith("\ufeff"):
            raise UsageError(f"{what}: {path} starts with a byte-order mark (BOM, as some Windows editors save "
                             "UTF-8). Fix: save it as UTF-8 without BOM, e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' <file>.")
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            if not rows and text.strip() in ("[", "{"):
                raise UsageError(f"{what}: {path} is one JSON document spread over lines (a pretty-printed "
                                 f"{'array' if text.strip() == '[' else 'object'}), not JSON Lines. Fix: one object "
                                 "per line, e.g. jq -c '.[]' <file> > <file>.jsonl.") from None
            raise UsageError(f"{what}: {path} line {number} is not valid JSON ({e.msg} at column {e.colno}). Fix: "
                             "one JSON object per line, e.g. {\"prompt\": \"...\"}.") from None
        if not isinstance(row, dict):
            raise UsageError(f"{what}: {path} line {number} is a JSON {type(row).__name__}, not an object. Fix: "
                             "one JSON object per line, e.g. {\"prompt\": \"...\"}.")
        rows.append((number, row))
    return rows


def check_messages(messages, where: str) -> None:
    """A chat: a non-empty list of {"role": str, "content": str} with a known role."""
    if not isinstance(messages, list) or not messages:
        raise UsageError(f"{where}: \"messages\" must be a non-empty list of {{\"role\", \"content\"}} objects.")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise UsageError(f"{where}: message {i + 1} must be an object with string \"role\" and \"content\", "
                             f"got {json.dumps(m)[:80]}.")
        if m["role"] not in ("system", "user", "assistant", "tool"):
            raise UsageError(f"{where}: message {i + 1} has role {m['role']!r}. Fix: system, user or assistant.")
    check_encodable([m["content"] for m in messages], where)


def check_encodable(texts: list[str], where: str) -> None:
    """Text a tokenizer can encode: JSON's \\ud800-style escapes can spell lone surrogates, which are no text."""
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise UsageError(f"{where}: holds a lone surrogate ({text[e.start:e.end].encode('unicode_escape').decode()} "
                             f"at character {e.start + 1}; JSON escapes like \\ud800 must come in pairs). Fix: write "
                             "the character itself, or drop it.") from None


def check_prompt_rows(rows: list[tuple[int, dict]], path) -> None:
    """Prompt files (eval/speculate.py and eval/acceptance.py prompts_file): "prompt" (a non-empty string) or
    "messages" (a chat ending in a user turn) on every line; "split", if given, tune or test."""
    for number, row in rows:
        where = f"prompts_file: {path} line {number}"
        if "prompt" not in row and "messages" not in row:
            raise UsageError(f"{where} has neither \"prompt\" nor \"messages\" (fields: {', '.join(row) or 'none'}). "
                             "Fix: {\"prompt\": \"...\"} or {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}.")
        if "prompt" in row and (not isinstance(row["prompt"], str) or not row["prompt"].strip()):
            raise UsageError(f"{where}: \"prompt\" must be a non-empty string, got {json.dumps(row['prompt'])[:60]}.")
        if "messages" in row:
            check_messages(row["messages"], where)
            if row["messages"][-1]["role"] != "user":
                raise UsageError(f"{where}: the last message must be the user's (the model answers it), got "
                                 f"{row['messages'][-1]['role']!r}.")
            if not row["messages"][-1]["content"].strip():
                raise UsageError(f"{where}: the last user message has empty \"content\" (nothing to answer). Fix: "
                                 "give it the question, or drop the line.")
        texts = [row["prompt"]] if "prompt" in row else [m["content"] for m in row["messages"]]
        check_encodable(texts, where)
        if row.get("split", "test") not in ("tune", "test"):
            raise UsageError(f"{where}: \"split\" must be tune or test, got {row['split']!r}.")


def check_data_file(path, fmt: str, what: str, torn_tail_ok: bool = False) -> None:
    """A training file of data.sources (kind: files): text (.txt: any UTF-8; .jsonl: a "text" field per line) or
    chat (.jsonl: a "messages" list per line). Parquet files are checked by the datasets reader. A file over
    FULL_CHECK_BYTES is checked on its first CHECKED_LINES lines (a check must stay fast; the reader still reads it
    all). `torn_tail_ok`: an answer store's last line cut short by a kill is left to the run, which drops it
    (data/generated.py)."""
    file = existing_file(path, what)
    if file.suffix == ".parquet":
        return
    limit = None if file.stat().st_size <= FULL_CHECK_BYTES else CHECKED_LINES
    if file.suffix != ".jsonl":
        read_lines(file, what, limit)  # plain text: UTF-8, not empty
        return
    if torn_tail_ok and torn_tail(file):
        return  # the rest was written whole, line by line, by the same store writer
    for number, row in read_jsonl(file, what, limit):
        where = f"{what}: {file} line {number}"
        if fmt == "chat":
            if "messages" not in row:
                raise UsageError(f"{where} has no \"messages\" (format: chat). Fix: {{\"messages\": [...]}} per "
                                 "line, or format: text for {\"text\": ...} lines.")
            check_messages(row["messages"], where)
        elif not isinstance(row.get("text"), str):
            raise UsageError(f"{where} has no string \"text\" (format: text). Fix: {{\"text\": \"...\"}} per line, "
                             "or format: chat for {\"messages\": [...]} lines.")


def writable_dir(path, what: str) -> Path:
    """A folder that exists or can be created, and can be written: a file is created in its nearest existing
    ancestor and removed again (os.access says yes to root, even under /proc or on a read-only mount)."""
    folder = Path(str(path)).expanduser()
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{what}: {probe} is a file, so {folder} cannot be a folder. Fix: choose another path.")
    try:
        fd, name = tempfile.mkstemp(dir=probe, prefix=".draftsmith-probe-")
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise UsageError(f"{what}: cannot write under {probe} ({e.strerror or e}). Fix: choose a writable path.") \
            from None
    return folder


def list_value(value, key: str, example: str):
    """A config value that must be a list (`drafts=/path` without brackets is a string, which would be read letter
    by letter): returned as a Python list."""
    from omegaconf import ListConfig

    if not isinstance(value, (list, tuple, ListConfig)):
        raise UsageError(f"{key} must be a list, got {value!r}. Fix: brackets, e.g. {key}=[{example}].")
    return list(value)


def number_in(value, name: str, low=None, high=None, integer: bool = False, low_open: bool = False,
              high_open: bool = False) -> None:
    """`value` is a number (an integer when asked) within [low, high] (ends open where asked)."""
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        raise UsageError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}.")
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if below or above:
        if high is None:
            span = f"{'>' if low_open else '>='} {low}"
        elif low is None:
            span = f"{'<' if high_open else '<='} {high}"
        else:
            span = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise UsageError(f"{name} must be {span}, got {value!r}.")


def torn_tail(path) -> int:
    """Bytes of a JSONL file's last line when a kill cut it short (no newline at the end, or not valid JSON); 0 for
    a whole file."""
    file = Path(str(path))
    size = file.stat().st_size if file.is_file() else 0
    if size == 0:
        return 0
    with open(file, "rb") as f:
        f.seek(max(0, size - (1 << 20)))
        tail = f.read()
    if tail.endswith(b"\n"):
        last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        try:
            json.loads(last)
            return 0
        except (json.JSONDecodeError, UnicodeDecodeError):
            return len(last) + 1
    return len(tail) - (tail.rfind(b"\n") + 1)


def check_source(source, what: str) -> None:
    """A data source given as a config value: its files exist and parse."""
    from omegaconf import DictConfig, OmegaConf

    source = OmegaConf.to_container(source, resolve=True) if isinstance(source, DictConfig) else source
    if not isinstance(source, dict):
        raise UsageError(f"{what} must be a data source, got {source!r}. Fix: "
                         f"'{what}={{kind: files, path: <answers>.jsonl, format: chat}}'.")
    if source.get("kind", "builtin") == "files":
        paths = sorted(glob.glob(str(Path(str(source.get("path"))).expanduser()))) or [source.get("path")]
        for path in paths:
            check_data_file(path, source.get("format", "text"), what)


def check_checkpoint_file(ckpt: Path) -> None:
    """A torch checkpoint is a zip archive: one cut short has no central directory at its end."""
    if ckpt.stat().st_size == 0 or not zipfile.is_zipfile(ckpt):
        raise UsageError(f"ckpt_path: {ckpt} is not a complete checkpoint (empty, cut short or not a torch "
                         "checkpoint). Fix: use another checkpoint of the run, e.g. its last.ckpt.")
