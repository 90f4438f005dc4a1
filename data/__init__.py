"""Data: tokenize with the target's tokenizer, pack fixed-length blocks, split, cache. Knows tokenizers, not models."""
