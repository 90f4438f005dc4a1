"""Loading models: `loading.py` (targets and drafts from a folder, a Hub id or an embedded wheel; vocabulary
checks), `embedded.py` (real models shipped inside PyPI wheels, converted once to a cache), `cpu_pair.py` (a target
and draft set up as the decoders run them, for benchmark scripts). May import decode/kernels and decode/drafts.
"""
