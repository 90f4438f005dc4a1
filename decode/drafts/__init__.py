"""Draft models beyond a plain causal LM, and cheaper forms of any draft.

`kinds.py` (the registry of feature-draft kinds, torch-free: a new kind is one module plus one entry there),
`feature_drafts.py` (the base class, Medusa heads, the EAGLE-style draft), the EAGLE-3 module, `features.py` (what
they read of the target), `feature_export.py` (their on-disk layouts for vLLM / speculators, and back),
`draft_vocab.py` (an LM head cut to the ids that matter), `quantize.py` (int8 / int4 draft weights). It may import
decode/kernels only.
"""
