"""Every verb that encodes a prompt refuses one longer than a GPT-2-shaped model's learned positions in one
line (exit 2) instead of an IndexError in the position table, and writes nothing. The walk finds every
prompt-carrying option of every visible verb; a new one must be added to CASES (and so gets tested)."""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import command_leaves, one_line_exit_2, run_cli

#: Options whose values are encoded as prompts (or prefixes / suffixes of one), and the shape of a value.
PROMPT_OPTIONS = {"--prompt": "text", "--qk-prompt": "text", "--suffix": "text", "--prompts-file": "lines",
                  "--prefix-file": "lines", "--prompt-set": "json-list", "--positive": "json-list",
                  "--negative": "json-list", "--control-file": "json-list", "--pairs": "json-pairs",
                  "--target-file": "json-targets", "--negative-file": "json-targets"}

LONG = " ".join(["word"] * 700)  # 700 GPT-2 tokens; tiny-gpt2 has 512 positions

#: verb -> the arguments it needs besides the long prompt (short, valid prompts for the other options).
BASE = {
    "generate": ["-p", "hi", "--max-new-tokens", "2"],
    "compare": ["-p", "hi", "--max-new-tokens", "2"],
    "measure explore": ["-s", "{s}", "--coverage-windows", "0", "--no-sensitivity", "--record-qk", "{out}.json"],
    "learn walls": ["-s", "{s}", "--target-file", "{targets}", "--control-file", "{controls}", "--steps",
                            "1", "-o", "{out}"],
    "learn steering-surfaces": ["-s", "{s}", "--target-file", "{targets}", "--control-file", "{controls}",
                             "--steps", "1", "-o", "{out}"],
    "learn vectors": ["--pairs", "{pairs}", "--layers", "1", "--out", "{out}"],
    "study manifold strength": ["-s", "{s}", "--scales", "1", "--max-new-tokens", "2", "-o", "{out}.json"],
    "learn scales": ["--target-file", "{targets}", "--control-file", "{controls}", "--steps",
                                      "1", "--layers", "1", "-o", "{out}"],
    "learn loreft": ["--target-file", "{targets}", "--control-file", "{controls}", "--steps", "1", "--layers", "1",
                     "--rank", "2", "-o", "{out}"],
    "study dynamics prefix-spread": ["--prefix-file", "{prefixes}", "--no-control", "-o", "{out}.json"],
    "study dynamics anchors": ["--prefix-file", "{prefixes}", "--seeds", "1", "-o", "{out}.json"],
}
#: (verb, option) pairs whose long value needs another option dropped or changed.
SWAP = {("measure explore", "--prompt"): ["--no-sensitivity", "--record-qk", "{out}.json"],
        ("measure explore", "--prompt-set"): ["--no-sensitivity", "--record-qk", "{out}.json"],
        ("learn vectors", "--positive"): ["--pairs", "{pairs}"],
        ("learn vectors", "--negative"): ["--pairs", "{pairs}"]}
EXTRA = {("learn vectors", "--positive"): ["--negative", "{negatives}"],
         ("learn vectors", "--negative"): ["--positive", "{negatives}"],
         ("measure explore", "--prompt-set"): ["--top", "1"], ("measure explore", "--prompt"): ["--top", "1"]}


def _walk() -> list[tuple[str, str]]:
    found = []
    for path, cmd in command_leaves(hidden=False).items():
        for p in cmd.params:
            flags = [o for o in getattr(p, "opts", []) if o in PROMPT_OPTIONS]
            if flags and getattr(p, "param_type_name", "") == "option" and not getattr(p, "is_flag", False):
                found.append((path, flags[0]))
    return found


CASES = _walk()


def test_the_walk_finds_every_prompt_verb():
    verbs = {v for v, _ in CASES}
    assert verbs == set(BASE), f"new verb(s) that encode a prompt: add them to BASE: {verbs ^ set(BASE)}"
    for known in [("learn vectors", "--pairs"), ("learn steering-surfaces", "--target-file"),
                  ("learn walls", "--control-file"), ("measure explore", "--qk-prompt")]:
        assert known in CASES


def _long_value(kind: str, tmp_path):
    if kind == "text":
        return LONG
    path = tmp_path / f"long-{kind}.{'txt' if kind == 'lines' else 'json'}"
    doc = {"lines": f"{LONG}\n{LONG}\n", "json-list": json.dumps([LONG]), "json-pairs": json.dumps([[LONG, "no"]]),
           "json-targets": json.dumps([{"prompt": LONG, "target": " x"}])}[kind]
    path.write_text(doc)
    return str(path)


@pytest.fixture(scope="module")
def gpt2_surfaces(tmp_path_factory):
    import geosteer
    from geosteer import manifold

    model, _ = geosteer.load_model("tiny-gpt2")
    bank = manifold.install(model)
    manifold.uninstall(model)
    return manifold.save(bank, tmp_path_factory.mktemp("gpt2") / "s")


@pytest.mark.parametrize("verb,flag", CASES, ids=[f"{v}:{f}" for v, f in CASES])
def test_a_prompt_past_the_learned_positions_is_one_line(monkeypatch, capsys, tmp_path, gpt2_surfaces, verb, flag):
    monkeypatch.chdir(tmp_path)
    files = {"targets": [{"prompt": "hi there", "target": " x"}], "controls": ["a control"],
             "pairs": [["good", "bad"]], "negatives": ["bad"], "prefixes": None}
    values = {"s": str(gpt2_surfaces), "out": str(tmp_path / "out")}
    for name, doc in files.items():
        path = tmp_path / f"{name}.{'txt' if doc is None else 'json'}"
        path.write_text("a short prefix\nanother prefix\n" if doc is None else json.dumps(doc))
        values[name] = str(path)
    args = list(BASE[verb])
    if flag in args:  # replace the short value
        i = args.index(flag)
        del args[i:i + 2]
    for drop in SWAP.get((verb, flag), []):
        if drop in args:
            i = args.index(drop)
            del args[i:i + (1 if drop.startswith("--no-") else 2)]
    args += EXTRA.get((verb, flag), [])
    args = [a.format(**values) for a in args]
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = run_cli(monkeypatch, capsys, *verb.split(), "-m", "tiny-gpt2", *args,
                           flag, _long_value(PROMPT_OPTIONS[flag], tmp_path))
    err = "\n".join(ln for ln in err.strip().splitlines() if not ln.startswith(("note: ", "warning: ")))
    one_line_exit_2(code, err)
    assert "positions" in err and "512" in err, err
    after = {p.name for p in tmp_path.iterdir()} - set(before) - {p.name for p in tmp_path.glob("long-*")}
    assert not after, f"left behind: {after}"

