"""What the CLI can check of a model before its weights load: its tokenizer (vendored for the tiny models, read
from a folder, the bundled model's cache or the local Hub cache), so that a prompt longer than the model's
positions is refused in one line before any model is built.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from geosteer.errors import GeosteerError


@lru_cache(maxsize=4)
def tokenizer_of(model: str):
    """The tokenizer of ``--model`` without its weights; ``None`` where that needs the model (a GGUF file, a Hub
    id not in the local cache, a bundled model not yet converted)."""
    from geosteer.models.tokenizers import gpt2_tokenizer, smollm2_tokenizer

    name = str(model)
    if name.startswith("tiny-"):
        return gpt2_tokenizer() if name == "tiny-gpt2" else smollm2_tokenizer()
    from geosteer.cache import cache_dir
    from geosteer.models.identity import HUB_IDS

    if name in HUB_IDS:
        folder = cache_dir() / name
        source = str(folder) if (folder / "tokenizer_config.json").is_file() else HUB_IDS[name]
    elif name.endswith(".gguf") or (Path(name).exists() and not Path(name).is_dir()):
        return None
    else:
        source = name
    if not Path(source).is_dir() and "/" not in source:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(source, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached or not a model folder: the loader says what is wrong later
        return None


def check_prompt_positions(tok, config, prompts: Iterable[str], what: str, *, special_tokens: bool = True,
                           extra: int = 0) -> None:
    """Refuse, in one line, the first of ``prompts`` whose tokens (plus ``extra`` generated ones) do not fit the
    positions of ``config`` (a model or its config); nothing is checked when either is unknown."""
    from geosteer.models.limits import max_positions

    limit = max_positions(config) if config is not None else None
    if tok is None or limit is None:
        return
    texts = list(prompts)
    for i, text in enumerate(texts):
        n = len(tok(text, add_special_tokens=special_tokens)["input_ids"]) + extra
        if n > limit:
            which = what if len(texts) == 1 else f"{what} {i + 1}"
            raise GeosteerError(f"{which} is {n} tokens, longer than the model's {limit} positions "
                                f"(max_position_embeddings); shorten it to at most {limit - extra} tokens")
