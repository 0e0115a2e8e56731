import os

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

TINY_FAMILIES = ["llama", "qwen2", "qwen3", "mistral", "gemma3", "gpt2", "gpt_neox"]


@pytest.fixture(scope="session")
def tiny_cache():
    """Tiny models are cheap but not free to build; share one per family across the session."""
    from geosteer import load_model

    cache = {}

    def get(family: str):
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
