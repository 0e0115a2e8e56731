"""The quickstart and the README's Python examples run as written, from a folder outside the checkout.

The quickstart runs on a tiny model saved as a folder of one's own (its path in place of
``path/to/my-model``, and layer numbers and step counts that fit a 3-layer model); the README's Python
section runs on the real default model with the surfaces shipped in the package."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart.md"
#: What the tiny stand-in needs changed: (text in the doc, its replacement); each must be in the doc.
TINY = [("--layers 6 ", "--layers 1 "),
        ("--layers 4-7 --steps 200", "--layers 1-2 --steps 2 --batch-size 2 --context 32 --eval-tokens 256"),
        ("layer=5", "layer=1")]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def _run_python(code: str, cwd: Path, timeout: int = 600) -> str:
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       env={**__import__("os").environ, "GEOSTEER_PROGRESS": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def _tiny_folder(tmp_path: Path) -> Path:
    from geosteer.models.tiny import tiny_model

    folder = tmp_path / "my-model"
    model, tok = tiny_model("llama")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_the_quickstart_runs_on_a_model_folder_of_ones_own(tmp_path, monkeypatch, capsys):
    from tests.cli_helpers import run_cli

    text = QUICKSTART.read_text(encoding="utf-8")
    for old, new in TINY:
        assert old in text, old
        text = text.replace(old, new)
    work = tmp_path / "work"  # outside the checkout
    work.mkdir()
    folder = _tiny_folder(tmp_path)
    text = text.replace("path/to/my-model", str(folder))
    py = blocks(text, "python")
    vector_code, surface_code = py[0], py[1]
    pairs = re.search(r"pairs = (\[.*?\]\])\n", vector_code, re.S).group(1)
    (work / "pairs.json").write_text(json.dumps(eval(pairs)))  # noqa: S307 - the doc's own literal
    monkeypatch.chdir(work)
    for block in blocks(text, "bash"):
        for line in block.strip().splitlines():
            args = shlex.split(line.split("  #")[0])
            assert args[0] == "geosteer"
            code, out, err = run_cli(monkeypatch, capsys, *args[1:])
            assert code == 0, (line, err)
            if args[1] == "compare":
                assert "stock:" in out and "intervened:" in out
            if args[1:3] == ["learn", "surfaces"]:
                assert "expected duration: about" in err and "an estimate" in err
    tok_folder = tmp_path / "no-tokenizer"  # the offline tokenizer recipe fills a folder without one
    tok_folder.mkdir()
    offline = next(b for b in py if "smollm2_tokenizer" in b).replace(str(folder), str(tok_folder))
    readme = _readme_section("Quickstart").replace("path/to/my-model", str(folder))
    out = _run_python("\n".join([vector_code, surface_code, offline, readme]), work)
    lines = out.splitlines()
    assert [ln.split(":")[0] for ln in lines[:3]] == ["stock", "steered", "surfaces"], out
    assert len(lines) == 4 and lines[3].strip() == lines[1].split(":", 1)[1].strip(), out  # README = the doc's steered
    assert (work / "happy" / "geosteer_config.json").is_file()
    assert (tok_folder / "tokenizer_config.json").is_file()


def _readme_section(name: str) -> str:
    """The first Python block of the README's section ``## name``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
    return blocks(section, "python")[0]


def test_the_readme_python_example_runs_outside_a_clone(tmp_path):
    """The default model and the shipped surfaces by name, from an empty folder: nothing of the checkout
    (no ``artifacts/``) is needed. The recipe it saves is written there and reads back."""
    code = _readme_section("Python")
    assert "artifacts/" not in code
    out = _run_python(code, tmp_path)
    ppl = [float(x) for x in out.split()]
    assert len(ppl) == 2 and all(1.0 < p < 1e4 for p in ppl) and ppl[0] != ppl[1]
    assert (tmp_path / "my-recipe" / "geosteer_config.json").is_file()
    from geosteer.recipe import load_recipe

    spec, _ = load_recipe(tmp_path / "my-recipe")
    assert spec.changed()["edits"]
