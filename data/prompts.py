"""Built-in evaluation prompts per domain (held out from training corpora: written for this project), or a JSONL file."""

from __future__ import annotations

import json
from pathlib import Path

BUILTIN = {
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


def load_prompts(domain: str, n: int, prompts_file: str | None = None) -> list:
    """Up to n prompts: strings, or chat message lists from a JSONL file (`prompt` or `messages` per line)."""
    if prompts_file:
        rows = [json.loads(line) for line in Path(prompts_file).read_text().splitlines() if line.strip()]
        prompts = [r["messages"] if "messages" in r else r["prompt"] for r in rows]
    elif domain in BUILTIN:
        prompts = BUILTIN[domain]
    else:
        raise ValueError(f"Unknown domain '{domain}'. Built-in: {', '.join(BUILTIN)}; or pass prompts_file=<jsonl>.")
    if not prompts:
        raise ValueError("No prompts to evaluate.")
    return prompts[:n]


def encode_prompt(tokenizer, prompt) -> list[int]:
    """Instruct targets get their chat template; base models the raw text."""
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
        return list(out["input_ids"])
    return tokenizer(messages[-1]["content"])["input_ids"]
