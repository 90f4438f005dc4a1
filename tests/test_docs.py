"""The documentation a newcomer reads: every relative link resolves, the README stays an entrance (size), and the
generated results pages match the result files they are rendered from."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub-style heading anchors: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text)))
    return out


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"


def test_readme_is_an_entrance_not_a_notebook():
    assert len((REPO / "README.md").read_bytes()) <= 16_000
    text = (REPO / "README.md").read_text()
    for needed in ("make demo", "make test", "eval/speculate.py", "docs/results.md"):
        assert needed in text


def test_generated_results_pages_are_up_to_date():
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "results_page.py"), "--check"], capture_output=True,
                         text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr


def test_results_renderer_refuses_a_result_without_its_command(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import results_page
    finally:
        sys.path.pop(0)
    bench = tmp_path / "bench"
    (bench / "decoding" / "x").mkdir(parents=True)
    (bench / "decoding" / "x" / "meta.json").write_text('{"title": "t", "date": "d", "commit": "c", "files": {}}')
    monkeypatch.setattr(results_page, "BENCH", bench)
    with pytest.raises(SystemExit, match="missing 'command'"):
        results_page.load_results()
