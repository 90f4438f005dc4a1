"""Speculative decoding and model loading: plain torch plus Hugging Face forward calls (no Lightning, no Hydra)."""
