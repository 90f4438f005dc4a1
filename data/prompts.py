"""Evaluation prompts per domain, held out from all training, split into `tune` and `test`; or a JSONL file.

Each domain's set is at least 200 prompts built offline from text the project ships, never a training prompt:
- general: the hand-written prompts below, and everyday topics x question templates used nowhere in training;
- medical: questions about the HPO terms and ICD-10-CM categories that data/corpora.py holds out of every corpus;
- code:    the hand-written prompts below, and "write this function" for the public functions of the standard-library
           modules data/corpora.py holds out.
A prompt's split is fixed by a hash of its text: `tune` prompts are for every choice (checkpoint selection in
training, gamma=auto, policy choice), `test` prompts for the numbers reported. A user's JSONL can carry the same
split with a "split" field per line.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import random

from data.checks import UsageError, check_prompt_rows, read_jsonl
from data.corpus_prompts import code_prompts, medical_prompts  # held-out items, the training prompts' templates

log = logging.getLogger("draftsmith.prompts")
SPLITS = ("tune", "test")
DOMAINS = ("general", "medical", "code")
TUNE_SHARE = 0.5  # of each domain's set; the rest is test

# Written for this project: part of the evaluation sets.
HAND_WRITTEN = {
    "general": [
        "Explain what a hash table is and when to use one.",
        "Write a short paragraph about why the sky is blue.",
        "What are three tips for writing clear documentation?",
        "Summarize the difference between a process and a thread.",
        "Describe how a bicycle's gears make pedaling easier.",
        "Give me a simple recipe for pancakes.",
        "What is the difference between weather and climate?",
        "Explain recursion to a beginner programmer.",
        "Why do leaves change color in autumn?",
        "List the planets of the solar system with one fact about each.",
        "What makes a good unit test?",
        "How does compound interest work?",
    ],
    "medical": [
        "What is hypertension and how is it usually treated?",
        "Describe the common symptoms of type 2 diabetes.",
        "What is the difference between a virus and a bacterium?",
        "Explain what an electrocardiogram measures.",
        "What are the risk factors for osteoporosis?",
        "Describe the symptoms of iron deficiency anemia.",
        "What is asthma and what triggers an attack?",
        "Explain what a phenotype is in clinical genetics.",
        "What does the ICD-10 code for pneumonia describe?",
        "Describe the stages of wound healing.",
        "What is chronic kidney disease?",
        "What are the warning signs of a stroke?",
    ],
    "code": [
        "Write a Python function that checks whether a string is a palindrome.",
        "Write a Python function to compute the n-th Fibonacci number iteratively.",
        "Write a Python class for a simple stack with push, pop and peek.",
        "Write a Python function that merges two sorted lists.",
        "Write a Python function that counts word frequencies in a text.",
        "Write a Python function that reads a CSV file and returns the rows as dictionaries.",
        "Write a binary search function in Python.",
        "Write a Python function that flattens a nested list.",
        "Write a Python function that removes duplicates from a list while keeping order.",
        "Write a Python decorator that times a function call.",
        "Write a Python function that validates an email address with a regular expression.",
        "Write a Python function to transpose a matrix given as a list of lists.",
    ],
}

# General evaluation prompts: topics and templates that no training prompt uses (data/generated.py TOPICS).
EVAL_TOPICS = """lighthouses; glaciers; deserts; octopuses; owls; penguins; whales; wolves; ants; mushrooms; tea;
chocolate; cheese making; pizza; sushi; spices; knitting; pottery; origami; woodworking; sailing; surfing; skiing;
rock climbing; bird watching; stargazing; telescopes; comets; eclipses; auroras; the periodic table; magnets; sound;
light; gravity; friction; clocks; calendars; alphabets; libraries; newspapers; radio; television; podcasts; board
games; puzzles; magic tricks; circuses; theaters; opera; ballet; the piano; drums; choirs; castles; pyramids; canals;
lighthouse keepers; firefighters; nurses; pilots; farmers; bakers; beekeeping; wind turbines; dams; rivers; islands;
caves; the Arctic; the Amazon river; the Silk Road; the Renaissance; the Vikings; ancient Greece; the Great Wall of
China; the metric system; public transport; bicycles; traffic lights; elevators; umbrellas; zippers; paper; glass;
concrete; cotton; wool; rubber""".split(";")
EVAL_TEMPLATES = ["Tell me about {} in a few sentences.", "What is worth knowing about {}?",
                  "What would a child find surprising about {}?", "Summarize what you know about {}."]


def general_evaluation() -> list[str]:
    return [t.format(" ".join(topic.split())) for topic in EVAL_TOPICS for t in EVAL_TEMPLATES]


@functools.lru_cache(maxsize=None)
def evaluation_prompts(domain: str) -> tuple[str, ...]:
    """Every evaluation prompt of a built-in domain (both splits), deterministically shuffled."""
    built = {"general": general_evaluation, "medical": lambda: medical_prompts(evaluation=True),
             "code": lambda: code_prompts(evaluation=True)}
    if domain not in built:
        raise UsageError(f"Unknown domain '{domain}'. Fix: one of {', '.join(built)}, or prompts_file=<jsonl>.")
    prompts = list(dict.fromkeys([*HAND_WRITTEN.get(domain, []), *built[domain]()]))
    random.Random(0).shuffle(prompts)
    return tuple(prompts)


@functools.lru_cache(maxsize=1)
def reserved_prompts() -> frozenset:
    """Every built-in evaluation prompt of every domain: never trained on."""
    return frozenset(p for d in DOMAINS for p in evaluation_prompts(d))


def split_of(prompt) -> str:
    """`tune` or `test`, fixed by a hash of the prompt's text (a chat prompt: its messages' JSON)."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
    return "tune" if int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) / 16**8 < TUNE_SHARE else "test"


def read_prompts_file(path: str, split: str | None) -> list:
    """Prompts of a JSONL file (`prompt` or `messages` per line; optional `split`: tune | test). With a split asked:
    the lines of that split; a file without `split` fields serves both (with a warning: tuning and reporting then
    share prompts)."""
    numbered = read_jsonl(path, "prompts_file")
    check_prompt_rows(numbered, path)
    rows = [row for _, row in numbered]
    if split is not None and any("split" in r for r in rows):
        rows = [r for r in rows if r.get("split") == split]
    elif split is not None:
        log.warning("%s has no \"split\" field: its prompts serve both tuning and reporting. Add "
                    "\"split\": \"tune\" or \"test\" per line to keep them apart.", path)
    return [r["messages"] if "messages" in r else r["prompt"] for r in rows]


def load_prompts(domain: str, n: int, prompts_file: str | None = None, split: str | None = "test") -> list:
    """The first n prompts of a domain's `split` (tune | test | None for both), or of a JSONL file."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be tune or test, got {split!r}.")
    if prompts_file:
        prompts = read_prompts_file(prompts_file, split)
    else:
        prompts = [p for p in evaluation_prompts(domain) if split is None or split_of(p) == split]
    if not prompts:
        raise UsageError(f"prompts_file: {prompts_file} has no {split} prompts (every line names the other \"split\"). "
                         f"Fix: mark some lines \"split\": \"test\", or split={'tune' if split == 'test' else 'test'}."
                         if prompts_file else f"No {split or ''} prompts to evaluate.")
    return prompts[:n]


def chats_of(tokenizer, prompts: list[str]) -> list[str]:
    """Each prompt as one user turn in the tokenizer's chat template, ready for the answer (the data engines' input)."""
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts]


def encode_prompt(tokenizer, prompt) -> list[int]:
    """Instruct targets get their chat template; base models the raw text."""
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
        return list(out["input_ids"])
    return tokenizer(messages[-1]["content"])["input_ids"]
