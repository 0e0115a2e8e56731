import os

import pytest
import torch

# at most 2 torch threads (tiny models gain nothing from more); under `pytest -n N` the N workers share the cores
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) if os.environ.get("PYTEST_XDIST_WORKER") else 1
_THREADS = max(1, min(2, (os.cpu_count() or 1) // _WORKERS))
_THREADS = int(os.environ.get("GEOSTEER_TEST_THREADS") or _THREADS)  # make test's rerun of `committed` tests
torch.set_num_threads(_THREADS)
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(_THREADS))  # and the processes a test starts

TINY_FAMILIES = ["llama", "qwen2", "qwen3", "mistral", "gemma3", "gpt2", "gpt_neox"]

# Files that keep a worker busy for 15 s or more (child processes, notebook kernels, a browser, the real
# model), longest first. Under xdist they are handed out first (make test passes --no-loadscope-reorder, which
# otherwise sends files out by test count, so these few-test files came last while the other worker idled);
# every other file follows in collection order. A missing name is ignored.
LONG_FILES = ("docs/test_notebooks.py", "e2e/test_studio_browser.py", "paper/vectors/test_frontier.py",
              "docs/test_packaging.py", "integrations/test_distributed.py", "paper/dynamics/test_critical.py",
              "integrations/test_lm_eval.py", "paper/studies/test_scripts.py", "manifold/test_real.py",
              "vectors/test_cli.py", "core/test_methods_load.py", "docs/test_site.py", "tasks/test_tasks.py",
              "dynamics/test_cli.py", "cli/test_disk_full.py", "bench/test_workers.py", "models/test_bundled_qwen.py")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order the files go out to the workers in
        rank = {f"tests/{name}": i for i, name in enumerate(LONG_FILES)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture
def toy_method():
    """The toy plugin of tests/core/toy_method registered for one test, then removed from the registry and
    from the ``geosteer`` command tree (both are process-wide)."""
    from geosteer import cli
    from geosteer.methods import unregister_method
    from tests.core import toy_method as toy

    yield toy.register()
    unregister_method("toy")
    cli.app.registered_commands[:] = [c for c in cli.app.registered_commands if c.name != "toy"]
    cli._registered.discard("method:toy")


@pytest.fixture(scope="session")
def tiny_model():
    """``tiny_model("llama")`` (or ``"tiny-llama"``) -> ``(model, tokenizer)``, built once per family per session.

    The models are shared: a test leaves them as it found them (interventions removed, weights untouched).
    """
    from geosteer import load_model

    cache = {}

    def get(family: str):
        family = family.removeprefix("tiny-")
        if family not in cache:
            cache[family] = load_model(f"tiny-{family}")
        return cache[family]

    return get


@pytest.fixture(scope="session")
def smollm2():
    from geosteer import load_model

    return load_model("smollm2")


def sample_ids(tok, n_batch: int = 2, text: str | None = None) -> torch.Tensor:
    text = text or ("The theory of relativity states that the laws of physics are the same for all "
                    "observers. She saw the man with the telescope, and the chicken is ready to eat.")
    ids = tok([text] * n_batch, return_tensors="pt", add_special_tokens=False).input_ids
    return ids


def random_ids(b: int = 2, t: int = 16, seed: int = 0, low: int = 5, high: int = 900) -> torch.Tensor:
    """A (b, t) batch of token ids drawn uniformly from [low, high) by a generator seeded with ``seed``."""
    return torch.randint(low, high, (b, t), generator=torch.Generator().manual_seed(seed))


def random_bank(model, seed: int = 0, scale: float = 0.5, **install_kw):
    """Surfaces for ``model`` (``manifold.install`` keywords: grid_size, grid_range, layers, ...), not installed,
    with coefficients ``scale`` x N(0, 1) from a generator seeded with ``seed``."""
    from geosteer import manifold

    bank = manifold.install(model, **install_kw)
    manifold.uninstall(model)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=torch.Generator().manual_seed(seed))
                                * scale)
    return bank
