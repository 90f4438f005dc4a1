"""What training and evaluation share, importing only data/ and decode/ (tests/test_layout.py), so train/ uses it
without importing evaluation:

- preflight.py: the checks every entry point runs before a model loads (config keys, model folders, vocabularies,
  devices) and the one-line usage errors;
- export.py, card.py, gguf.py: the export, in one place: a training checkpoint as a Hugging Face folder with its
  draftsmith.json, the model card beside it (and its measured rows, which evaluation adds), the GGUF file llama.cpp
  serves (and where llama.cpp's build lives); a feature draft's weight layout is decode/drafts/feature_export.py's,
  which the loader reads back;
- vllm_server.py, server_process.py: a `vllm serve` process (the vLLM engine and the vLLM data engine start it)
  and the process plumbing both servers use;
- lora.py: LoRA adapters on a draft (peft) and their merge into plain weights, for training and its export;
- provenance.py, tracking.py: what a run records about its code and weights, and how it reaches Weights & Biases.
"""
