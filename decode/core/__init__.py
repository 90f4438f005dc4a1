"""The decoding loop and its laws: what every proposer plugs into.

`speculative.py` (Proposer / Verifier protocols, the chain verifier, `generate`), `sampling.py` (the lossless
accept/reject rule), `trees.py` (token-tree masks, positions, acceptance; `TreeDraft`), `metrics.py` (α, τ, the cost
model's formulas), `stats.py` (intervals across prompts), `replay.py` (exact acceptance replayed on the target's own
path), `costs.py` (the cost model measured on this machine). May import decode/kernels and decode/drafts only.
A new proposer does not go here: see decode/proposers.
"""
