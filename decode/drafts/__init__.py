"""Draft models beyond a plain causal LM, and cheaper forms of any draft.

`feature_drafts.py` (Medusa heads, the EAGLE-style draft on the target's features), `eagle3.py` (EAGLE-3's fused
multi-layer features), `feature_export.py` (their on-disk layouts for vLLM / speculators, and back), `kinds.py` (the kinds, torch-free),
`draft_vocab.py` (an LM head cut to the ids that matter), `quantize.py` (int8 / int4 draft weights). A new draft
kind goes here; it may import decode/kernels only.
"""
