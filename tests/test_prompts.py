"""Evaluation prompt sets: large enough, split into tune and test, and held out of every training corpus, prompt
and store."""

import pytest

from data.corpora import HPO_EVERY, ICD_EVERY, held_out, hpo_terms, icd10_categories, icd10cm, medical_hpo, \
    stdlib_files
from data.prompts import DOMAINS, evaluation_prompts, load_prompts, reserved_prompts, split_of
from data.sources import iter_source


@pytest.mark.parametrize("domain", DOMAINS)
def test_each_domain_has_at_least_200_prompts_split_into_tune_and_test(domain):
    prompts = evaluation_prompts(domain)
    assert len(prompts) >= 200 and len(set(prompts)) == len(prompts)
    tune, test = load_prompts(domain, 10_000, split="tune"), load_prompts(domain, 10_000, split="test")
    assert len(tune) >= 80 and len(test) >= 80 and not set(tune) & set(test)
    assert sorted(tune + test) == sorted(prompts) and all(split_of(p) == "tune" for p in tune)
    assert load_prompts(domain, 5) == test[:5]  # reported numbers read test by default


def test_held_out_items_are_in_no_training_corpus():
    held_terms = [name for name, _ in hpo_terms() if held_out(name, HPO_EVERY)]
    held_codes = [code for code, _, _ in icd10_categories() if held_out(code, ICD_EVERY)]
    assert len(held_terms) > 100 and len(held_codes) > 10
    training_terms = {doc.split(":", 1)[0] for doc in medical_hpo()}
    assert not training_terms & set(held_terms)
    training_codes = {doc.split("\n")[1].split(" ")[0] for doc in icd10cm()}
    assert not training_codes & set(held_codes)
    held_files, training_files = stdlib_files(evaluation=True), stdlib_files()
    assert held_files and not set(held_files) & set(training_files)  # python_code/python_docs read training_files


def test_a_store_that_asks_an_evaluation_prompt_is_filtered_on_read(tmp_path, caplog):
    import json

    asked = evaluation_prompts("medical")[0]
    store = tmp_path / "store.jsonl"
    rows = [[{"role": "user", "content": q}, {"role": "assistant", "content": "answer"}]
            for q in (asked, "What is a cloud?")]
    store.write_text("".join(json.dumps({"messages": r}) + "\n" for r in rows))
    with caplog.at_level("WARNING"):
        kept = list(iter_source({"kind": "files", "path": str(store), "format": "chat"}))
    assert [r[0]["content"] for r in kept] == ["What is a cloud?"] and "skipped 1" in caplog.text
    assert asked in reserved_prompts()
