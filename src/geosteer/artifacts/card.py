"""Model cards (README.md with Hugging Face Hub metadata) for artifact folders."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from geosteer.artifacts.hub import CARD_NAME, REPO_ID
from geosteer.io_utils import atomic_write_text
from geosteer.models.loading import hub_id

__all__ = ["CARD_NAME", "render_model_card", "write_model_card"]


def _fmt_num(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.4f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def render_model_card(*, method: str, base_model: str, title: str | None = None, summary: str = "",
                      training: Mapping[str, Any] | None = None, ppl_before: float | None = None,
                      ppl_after: float | None = None, command: str | None = None,
                      n_parameters: int | None = None, files: Iterable[str] = (),
                      extra: Mapping[str, Any] | None = None, tags: Iterable[str] = (),
                      license: str = "apache-2.0", datasets: Iterable[str] = ()) -> str:
    """Model card text with Hub front matter (``library_name: geosteer``, ``base_model`` as its Hub id,
    ``datasets``, tags); ``training``, ``ppl_before``/``ppl_after`` and ``command`` go into the body.
    """
    import yaml
    from huggingface_hub import ModelCardData

    tag_list = list(dict.fromkeys(["geosteer", method.split(".")[0], *tags]))
    hub_base = hub_id(str(base_model))
    data = ModelCardData(library_name="geosteer", license=license,
                         base_model=hub_base if REPO_ID.match(hub_base) else None,
                         datasets=list(datasets) or None, tags=tag_list).to_dict()
    ordered = {"library_name": data.pop("library_name"), **data}
    front = ["---", yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True).strip(), "---"]
    lines = [*front, "", f"# {title or f'{method} for {base_model}'}", ""]
    if summary:
        lines += [summary.strip(), ""]
    lines += ["| field | value |", "|---|---|", f"| method | `{method}` |",
              f"| base model | `{base_model}`" + (f" (`{hub_base}`)" if hub_base != str(base_model) else "") + " |"]
    if n_parameters is not None:
        lines.append(f"| trainable parameters | {_fmt_num(int(n_parameters))} |")
    train = dict(training or {})
    if "data" in train:
        lines.append(f"| training data | {train.pop('data')} |")
    if "tokens" in train:
        lines.append(f"| training tokens | {_fmt_num(train.pop('tokens'))} |")
    for k, v in train.items():
        lines.append(f"| {k} | {_fmt_num(v)} |")
    lines.append(f"| held-out perplexity before | {_fmt_num(ppl_before)} |")
    lines.append(f"| held-out perplexity after | {_fmt_num(ppl_after)} |")
    for k, v in (extra or {}).items():
        lines.append(f"| {k} | {_fmt_num(v)} |")
    lines.append("")
    if command:
        lines += ["## Command", "", "```bash", command.strip(), "```", ""]
    files = list(files)
    if files:
        lines += ["## Files", ""] + [f"- `{f}`" for f in files] + [""]
    lines += ["## Use", "", "```python", "import geosteer", "model, tok = geosteer.load_model("
              f"{json.dumps(str(base_model))})",
              "# load this folder with the loader of its method (see geosteer's docs), then",
              "# with geosteer.steer(model, artifact): ...", "```", ""]
    return "\n".join(lines)


def write_model_card(folder: str | Path, text: str | None = None, **card: Any) -> Path:
    """Write ``README.md`` into ``folder`` atomically: ``text`` as given, or :func:`render_model_card`."""

    body = text if text is not None else render_model_card(**card)
    return atomic_write_text(Path(folder) / CARD_NAME, body)
