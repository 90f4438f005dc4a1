"""Serving engines behind one interface: each is started as its own server process, serves one prompt at a time and
reports its own counts, so eval/speculate.py times it beside our decoder, prompt by prompt, with no code of its own.

An engine is one object with a `key` (its config key in conf/speculate.yaml, a list of methods), `settings(cfg)`
(what that list asks for, its plain decoding first: every speedup divides by the same engine's plain speed) and
`start(setting, cfg, stack, log)` (a server started inside `stack`, returned as a `run(prompt, max_new_tokens,
params, eos, generator)` callable whose result has tokens, prefill_s, decode_s, drafted, accepted and, where the
engine counts them, rejected). A fifth engine is one module with such an object and one line in ENGINES.

    with contextlib.ExitStack() as stack:
        arms = served_arms(cfg, stack, out)            # [(Setting, run), ...], each engine's plain first
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# engine name -> "module:object"; imported only when a config asks for that engine
ENGINES = {"llama.cpp": "eval.llamacpp:ENGINE", "vllm": "eval.vllm:ENGINE"}


@dataclass(frozen=True)
class Setting:
    engine: str              # a key of ENGINES
    method: str              # plain | draft | ngram
    draft: str | None = None  # the draft as named in drafts=[...] (method draft)
    gamma: int = 0           # tokens drafted per step (0: plain, or the engine's default)

    @property
    def proposer(self) -> str:
        return f"{self.engine} {self.method}"

    @property
    def name(self) -> str:
        return self.draft or self.proposer


class Engine(Protocol):
    name: str
    key: str

    def settings(self, cfg) -> list[Setting]: ...

    def start(self, setting: Setting, cfg, stack, log: Path): ...


def engine(name: str) -> Engine:
    module, obj = ENGINES[name].split(":")
    return getattr(importlib.import_module(module), obj)


def asked(cfg) -> list[Engine]:
    """The engines this config lists methods for (conf/speculate.yaml: llamacpp=[...], vllm=[...])."""
    return [e for e in map(engine, ENGINES) if cfg.get(e.key)]


def served_arms(cfg, stack, out: Path) -> list[tuple[Setting, object]]:
    """(setting, run) for every engine setting asked for, each engine's plain first: one server each, started now
    (logs in `out`), stopped when `stack` closes."""
    out.mkdir(parents=True, exist_ok=True)
    arms = []
    for e in asked(cfg):
        for k, setting in enumerate(e.settings(cfg)):
            slug = e.name.replace(".", "").replace(" ", "-")
            arms.append((setting, e.start(setting, cfg, stack, out / f"{slug}-{k}.log")))
    return arms


def plain_of(arms: list[tuple[Setting, object]], setting: Setting) -> int:
    """The index of `setting`'s engine's plain arm in `arms`: its speedup's baseline."""
    return next(k for k, (s, _) in enumerate(arms) if s.engine == setting.engine and s.method == "plain")


def fixed_gammas(cfg) -> list[int]:
    """The fixed gammas asked for (gamma=auto is our decoder's own choice; a served engine drafts a fixed number)."""
    return [int(g) for g in ([cfg.gamma] if isinstance(cfg.gamma, (int, str)) else cfg.gamma) if g != "auto"]
