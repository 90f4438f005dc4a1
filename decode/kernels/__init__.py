"""Speed without changing a result: `fast_linear.py` (the fastest small-batch matmul layout per row count, timed),
`compiled.py` (static KV caches and torch.compile), `runtime.py` (threads, allocator), `timing.py` (calls timed in
turns). A new kernel goes here; it imports nothing else from decode.
"""
