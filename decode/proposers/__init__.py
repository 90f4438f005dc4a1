"""Ways to draft tokens, each a Proposer of decode/core/speculative.py (tree proposers bring their Verifier), found
by name through `registry.py` (torch-free: the names, their builders, what evaluation needs to run them).

`draft_model.py` (a draft model's chain), `ngram.py` (prompt lookup), `tree.py` (static and dynamic token trees from
a draft model), `any_tree.py` (the tree of any draft), `router.py` (a proposer chosen per step by the cost model, or
none), `schedule.py` and `predict_gamma.py` (how many tokens to draft), `feature_decoding.py` and `eagle_tree.py`
(chains and trees of feature drafts). A new proposer is a new module here with a `build(request)` function, plus
one entry in registry.py PROPOSERS; it may import decode/core, decode/drafts and decode/kernels.
"""
