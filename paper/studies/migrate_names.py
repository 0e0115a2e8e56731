"""Rewrite the committed results files and reproduction items once to the current names.

Run once from the repository root (``python paper/studies/migrate_names.py``; ``--check`` lists what it would
change and exits 1 if anything is left). What it rewrites, and nothing else:

- the directional residual sites' earlier names, ``resid_attn`` -> ``attn_out``, ``resid_mlp`` -> ``mlp_out``,
  ``resid_block`` -> ``resid_post``: the value of every ``site`` / ``scale_site`` key of the JSON files under
  ``docs/results`` and of the item files (``paper/src/geosteer_paper/reproduction/items/*.json``), the ``geometry`` rows
  of the MLP-internal study (``resid_mlp`` -> ``mlp_out``, its residual geometry), and the items' value names
  that start with an old site name (``resid_attn_0`` -> ``attn_out_0``) with the criteria that name them;
- the ``<phase>_<site>_ratio`` lines of the directional cost benchmark's text logs
  (``docs/results/benchmarks/directional_cost_*.txt``);
- the removed verbs in a recorded ``command``: ``geosteer directional ppl`` -> the ``geosteer ppl --set ...``
  command that gives the same numbers, ``geosteer dynamics ablate|gains`` -> ``geosteer study dynamics
  ablate|gains``.
- one spelling per option in a recorded ``command``: the window length is ``--context`` (was ``--seq-len``
  on ``geosteer dynamics ...``, ``geosteer study dynamics ...`` and ``geosteer manifold train``, ``--ctx`` on
  ``geosteer study directional pretrain``) and the batch size ``--batch-size`` (was ``--batch`` on those two
  trainers); the scripts' options (``python ...`` commands) are left alone.

Numbers are never touched; JSON files keep their indentation. The reproduction report's statuses are the
same before and after (``geosteer study report --json --out FILE`` on both sides, compared by item).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

SITES = {"resid_attn": "attn_out", "resid_mlp": "mlp_out", "resid_block": "resid_post"}
SITE_KEYS = ("site", "scale_site")
OLD_LABEL = re.compile(r"^(resid_attn|resid_mlp|resid_block)(?=_|$)")
VERBS = [
    (re.compile(r"geosteer directional ppl --site (\S+) --s-par (\S+) --value-space (\S+) --tokens (\S+) "
                r"--context (\S+) --stride (\S+)( --json)?"),
     r"geosteer ppl --corpus heldout --max-tokens \4 --context \5 --stride \6\7 --set scale_site=\1 "
     r"--set scale_par=\2 --set scale_value_space=\3 (the baseline: without --set)"),
    (re.compile(r"geosteer dynamics (ablate|gains)\b"), r"geosteer study dynamics \1"),
]


# verb (as the command starts) -> {old option: new option}
OPTIONS = {
    "geosteer dynamics": {"--seq-len": "--context"},
    "geosteer study dynamics": {"--seq-len": "--context"},
    "geosteer manifold train": {"--seq-len": "--context", "--batch": "--batch-size"},
    "geosteer study directional pretrain": {"--ctx": "--context", "--batch": "--batch-size"},
}
_SEGMENT = re.compile(r"(&&|\|\||;|\|)")


def rename_options(command: str) -> str:
    """``command`` with the old option spellings of the verbs in :data:`OPTIONS` replaced, per segment of a
    chained command line (``a && b; c``)."""
    parts = _SEGMENT.split(command)
    for i, part in enumerate(parts):
        for verb, renames in OPTIONS.items():
            if re.search(rf"(^|\s){re.escape(verb)}\b", part):
                for old, new in renames.items():
                    part = re.sub(rf"(?<=\s){re.escape(old)}(?=[\s=]|$)", new, part)
        parts[i] = part
    return "".join(parts)


def _label(name):
    return OLD_LABEL.sub(lambda m: SITES[m.group(1)], name) if isinstance(name, str) else name


def _rewrite(obj, item: bool = False):
    """``obj`` with the old names replaced (see the module docstring)."""
    if isinstance(obj, list):
        return [_rewrite(x, item) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for k, v in obj.items():
        if k in SITE_KEYS and v in SITES:
            v = SITES[v]
        elif k == "geometry" and v == "resid_mlp":
            v = "mlp_out"
        elif k == "command" and isinstance(v, str):
            for pat, rep in VERBS:
                v = pat.sub(rep, v)
            v = rename_options(v)
        elif item and k in ("value", "p") and isinstance(v, str):
            v = _label(v)
        elif item and k in ("values", "se") and isinstance(v, list):
            v = [_label(x) for x in v]
        if item and k == "ours" and isinstance(v, dict):
            v = {_label(n): _rewrite(q, item) for n, q in v.items()}
        else:
            v = _rewrite(v, item)
        out[k] = v
    return out


def _indent(text: str) -> int | None:
    m = re.search(r"\n( +)\S", text)
    return len(m.group(1)) if m else None


def migrate_json(path: Path, item: bool) -> str | None:
    """The new text of ``path``, or None when nothing changes."""
    text = path.read_text()
    data = json.loads(text)
    new = _rewrite(data, item)
    if new == data:
        return None
    return json.dumps(new, indent=_indent(text), ensure_ascii=False) + ("\n" if text.endswith("\n") else "")


def migrate_text(path: Path) -> str | None:
    text = path.read_text()
    new = re.sub(r"^(\w+?)_(resid_attn|resid_mlp|resid_block)_ratio",
                 lambda m: f"{m.group(1)}_{SITES[m.group(2)]}_ratio", text, flags=re.M)
    return None if new == text else new


def plan(root: Path) -> dict[Path, str]:
    """Every file that changes, with its new text."""
    todo: dict[Path, str | None] = {}
    for p in sorted((root / "docs" / "results").rglob("*.json")):
        todo[p] = migrate_json(p, item=False)
    for p in sorted((root / "paper" / "src" / "geosteer_paper" / "reproduction" / "items").glob("*.json")):
        todo[p] = migrate_json(p, item=True)
    for p in sorted((root / "docs" / "results" / "benchmarks").glob("directional_cost_*.txt")):
        todo[p] = migrate_text(p)
    return {p: t for p, t in todo.items() if t is not None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    ap.add_argument("--root", type=Path, default=Path("."), help="repository root (default: here)")
    ap.add_argument("--check", action="store_true", help="list what would change; exit 1 if anything would")
    args = ap.parse_args(argv)
    changes = plan(args.root)
    for p, text in changes.items():
        print(p)
        if not args.check:
            p.write_text(text)
    return 1 if args.check and changes else 0


if __name__ == "__main__":
    sys.exit(main())
