"""The answer stores kept in the repository (data/stores/) are what their README says: each holds the first n
prompts of its domain's training set (seed 0), each once, never an evaluation prompt of any domain, every answer
non-empty, written greedy with the settings its settings file names."""
import json
from pathlib import Path

import pytest

from data.generated import domain_prompts
from data.prompts import reserved_prompts

STORES = sorted((Path(__file__).resolve().parents[1] / "data" / "stores").glob("*/*.jsonl"))


def test_the_repository_keeps_a_store_per_domain():
    assert {p.stem for p in STORES} >= {"medical", "general", "code"}


@pytest.mark.parametrize("store", STORES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_kept_store_holds_its_domains_first_prompts_and_no_evaluation_prompt(store):
    records = [json.loads(line) for line in store.read_text(encoding="utf-8").splitlines()]
    prompts = [next(m["content"] for m in r["messages"] if m["role"] == "user") for r in records]
    answers = [r["messages"][-1] for r in records]
    assert len(set(prompts)) == len(prompts), "a prompt answered twice"
    assert set(prompts) == set(domain_prompts(store.stem, len(prompts))), "not the domain's first n prompts (seed 0)"
    assert not set(prompts) & reserved_prompts(), "an evaluation prompt in a training store"
    assert all(a["role"] == "assistant" and a["content"].strip() for a in answers), "an empty answer"
    settings = json.loads(Path(f"{store}.settings.json").read_text())
    assert settings["temperature"] == 0.0 and settings["max_new_tokens"] > 0
