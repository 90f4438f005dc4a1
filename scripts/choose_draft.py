"""Name the draft that pays most in a tune-prompt run of eval/speculate.py with `reference_draft=` (the rule
bench/decoding/qwen-domain-store/choose.sh applies: the highest speedup over target-only), with each candidate
against the winner prompt by prompt, so a tie shows as one. Writes choice.json and choice.md beside results.json.

    python scripts/choose_draft.py outputs/bench/qwen-medical-choice-tune-960/results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.reference import choice_table, choose  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/choose_draft.py <results.json of a run with reference_draft=>", file=sys.stderr)
        return 2
    path = Path(argv[0])
    if not path.is_file():
        print(f"error: no {path}. Fix: run eval/speculate.py (choose.sh) first", file=sys.stderr)
        return 2
    data = json.loads(path.read_text())
    references = {r["over_reference"]["draft"] for r in data["records"] if "over_reference" in r}
    if len(references) != 1:
        print(f"error: {path} was not measured with reference_draft=, so no draft is the reference. "
              "Fix: rerun with reference_draft=<the off-the-shelf draft>", file=sys.stderr)
        return 2
    try:
        choice = choose(data["records"], references.pop())
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    (path.parent / "choice.json").write_text(json.dumps(choice, indent=1) + "\n")
    table = choice_table(choice)
    (path.parent / "choice.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
