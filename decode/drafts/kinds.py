"""The feature-draft kinds and how to tell an export folder's kind from its files. Plain Python (no torch), so
config checks that run before any model loads (eval/checks.py) read kinds the same way decoding does."""

from __future__ import annotations

import json
from pathlib import Path

FEATURE_KINDS = ("medusa", "eagle", "eagle3")
EAGLE_KINDS = ("eagle", "eagle3")  # autoregressive over their own outputs: one proposer, one tree proposer


def feature_kind_of(folder) -> str | None:
    """'medusa', 'eagle' or 'eagle3' when `folder` holds a feature draft, else None (no, or an unreadable,
    draftsmith.json)."""
    path = Path(str(folder)) / "draftsmith.json"
    if not path.is_file():
        return None
    try:
        kind = json.loads(path.read_text()).get("draft_kind")
    except json.JSONDecodeError:
        return None
    return kind if kind in FEATURE_KINDS else None
