"""The house rules of the source tree: imports go one way, no module imports itself back through others, and
decode/ keeps its top level small (decode/__init__.py says what lives where)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("decode", "data", "train", "eval")
# what each decode subpackage may import besides itself (decode/__init__.py)
DECODE_MAY_IMPORT = {"kernels": set(), "drafts": {"kernels"}, "models": {"kernels", "drafts"},
                     "core": {"kernels", "drafts"}, "proposers": {"core", "drafts", "kernels"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path) -> set[str]:
    """Every project module `path` imports, at the top or inside a function (both can close a circle)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}  # `from decode.core import speculative`
    return {m for m in found if m.split(".")[0] in PACKAGES}


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return {name: {m for m in project_imports(path) if m in files and m != name} for name, path in files.items()}


def test_no_import_circles():
    g = graph()
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(g[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(nxt):] + [node, nxt]))
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [])


def test_data_and_decode_import_nothing_above_them():
    g = graph()
    for name, imports in g.items():
        top = name.split(".")[0]
        if top in ("data", "decode"):
            upward = sorted(m for m in imports if m.split(".")[0] not in (top, "data" if top == "data" else "decode"))
            assert not upward, f"{name} imports {upward}: data/ and decode/ import nothing from train/ or eval/"
        if top == "decode":
            assert not [m for m in imports if m.startswith("data")], f"{name} imports data/"


def test_shared_infrastructure_imports_no_evaluation_and_training_imports_only_it_from_eval():
    """eval/shared is what train/ and eval/ share (eval/shared/__init__.py): it imports data/, decode/ and itself;
    train/ imports nothing else of eval/, so training never imports evaluation."""
    for name, imports in graph().items():
        if name.startswith("eval.shared"):
            other = sorted(m for m in imports if m.split(".")[0] not in ("data", "decode")
                           and not m.startswith("eval.shared"))
            assert not other, f"{name} imports {other}: eval/shared imports only data/, decode/ and itself"
        if name.split(".")[0] == "train":
            evaluation = sorted(m for m in imports if m.split(".")[0] == "eval" and not m.startswith("eval.shared"))
            assert not evaluation, f"{name} imports {evaluation}: train/ may import eval/shared only"


def test_decode_subpackages_import_one_way():
    for name, imports in graph().items():
        parts = name.split(".")
        if parts[0] != "decode" or len(parts) < 3:
            continue
        sub = parts[1]
        for m in imports:
            other = m.split(".")[1] if m.count(".") >= 1 else None
            if other and other != sub:
                assert other in DECODE_MAY_IMPORT[sub], (f"{name} imports {m}: decode/{sub} may import "
                                                         f"{sorted(DECODE_MAY_IMPORT[sub]) or 'nothing else'}")


def test_decode_top_level_is_small_and_every_subpackage_says_what_lives_there():
    top = [p.name for p in (ROOT / "decode").iterdir() if p.is_file() and p.suffix == ".py"]
    assert len(top) <= 6, top
    for sub in DECODE_MAY_IMPORT:
        init = ROOT / "decode" / sub / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "import" in doc, f"{init} needs a docstring saying what lives there and what it may import"
    assert set(DECODE_MAY_IMPORT) == {p.name for p in (ROOT / "decode").iterdir()
                                      if p.is_dir() and (p / "__init__.py").is_file()}


def test_config_comments_are_one_line_a_key_and_the_manual_lives_in_docs():
    """conf/ comments say what a key does in a line; docs/configuration.md is the manual."""
    total, long_lines = 0, []
    for path in sorted((ROOT / "conf").rglob("*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            at = line.find("#")
            if at < 0 or line.strip().startswith("# @package"):
                continue
            total += len(line) - at
            if len(line) - at > 120:
                long_lines.append(f"{path.relative_to(ROOT)}:{number}")
    assert total < 15_000, f"conf/ comments hold {total} characters: move the manual to docs/configuration.md"
    assert not long_lines, f"comments over 120 characters: {long_lines}"
    assert (ROOT / "docs" / "configuration.md").exists()
