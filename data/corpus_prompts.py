"""Prompts built from the domain corpora (data/corpora.py): questions about medical terms and Python functions.

Each corpus item is on the training side or held out (data/corpora.py held_out): training prompts
(data/generated.py) come from the first, the built-in evaluation prompts (data/prompts.py) from the second, with
the same templates."""

from __future__ import annotations

import ast
import re
from typing import Iterator

from data.corpora import HPO_EVERY, ICD_EVERY, held_out, hpo_terms, icd10_categories, stdlib_files

_FIRST_SENTENCE = re.compile(r"^(.{20,200}?[.!?])(\s|$)", re.S)


def _first_sentence(text: str) -> str | None:
    m = _FIRST_SENTENCE.match(" ".join(text.split()))
    return m.group(1) if m else None


def medical_prompts(evaluation: bool = False) -> Iterator[str]:
    """Questions about HPO terms and ICD-10-CM categories: the training side's, or (evaluation=True) the held-out
    items' (data/corpora.py held_out)."""
    templates = ["What is {}?", "Explain {} in simple terms.", "What are the typical signs of {}?",
                 "How would a doctor describe {} to a patient?"]
    i = 0
    for name, _ in hpo_terms():  # the template rotates over the side's terms
        if held_out(name, HPO_EVERY) == evaluation:
            yield templates[i % len(templates)].format(name.strip().lower())
            i += 1
    for code, name, _ in icd10_categories():
        if name and held_out(code, ICD_EVERY) == evaluation:
            yield f"Describe the condition '{name}' (ICD-10-CM {code}): causes, symptoms and treatment."


def code_prompts(evaluation: bool = False) -> Iterator[str]:
    """"Write a Python function `name(args)`. <first docstring sentence>" for the standard library's public
    top-level functions: the training side's modules, or (evaluation=True) the held-out ones."""
    for path in stdlib_files(evaluation):
        try:
            source = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for m in re.finditer(r'^def (\w+)\(([^)]*)\):\n\s+"""(.+?)"""', source, re.M | re.S):
            name, args, doc = m.group(1), " ".join(m.group(2).split()), _first_sentence(m.group(3))
            if doc and not name.startswith("_"):
                yield f"Write a Python function `{name}({args})`. {doc}"


def code_member_prompts(evaluation: bool = False) -> Iterator[str]:
    """More code prompts from the same modules, for where code_prompts runs out: "Write a Python class `Name`.
    <first docstring sentence>" for public top-level classes and "Write the method `Class.name(args)` of a Python
    class. <sentence>" for their public methods, from the training side's modules (or the held-out ones)."""
    for path in stdlib_files(evaluation):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")):
            doc = _first_sentence(ast.get_docstring(cls) or "")
            if doc:
                yield f"Write a Python class `{cls.name}`. {doc}"
            for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")):
                doc = _first_sentence(ast.get_docstring(fn) or "")
                if doc:
                    yield f"Write the method `{cls.name}.{fn.name}({ast.unparse(fn.args)})` of a Python class. {doc}"
