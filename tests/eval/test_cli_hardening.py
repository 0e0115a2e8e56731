"""Clear one-line errors instead of tracebacks, bounded reading for ``ppl``, generation limits (issue 11:
items 7 and 9, the "clear errors" list and ``--temperature 0``)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from geosteer import manifold
from geosteer.eval import textfile
from geosteer.eval.perplexity import encode, strided_perplexity
from geosteer.eval.textfile import encode_file
from tests.cli_helpers import one_line_exit_2 as _one_line_exit_2
from tests.cli_helpers import run_cli


@pytest.fixture
def no_model(monkeypatch):
    """Make loading a model fail loudly: the command must refuse its options before it gets there."""
    import geosteer

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the options were validated")

    monkeypatch.setattr(geosteer, "load_model", boom)


@pytest.mark.parametrize("args,needle", [
    (["ppl", "--model", "tiny-llama", "--corpus", "heldout", "--batch-size", "-1"], "--batch-size must be >= 1"),
    (["ppl", "--model", "tiny-llama", "--corpus", "heldout", "--batch-size", "0"], "--batch-size must be >= 1"),
    (["ppl", "--model", "tiny-llama", "--corpus", "heldout", "--max-tokens", "1"], "--max-tokens must be >= 2"),
    (["compare", "--model", "tiny-llama", "-p", "Hi", "--seeds", "1", "--temperature", "nan"], "finite"),
    (["compare", "--model", "tiny-llama", "-p", "Hi", "--seeds", "1", "--temperature", "0"], "T = 0"),
    (["compare", "--model", "tiny-llama", "-p", "Hi", "--seeds", "-2"], "--seeds must be >= 0"),
    (["compare", "--model", "tiny-llama", "-p", "Hi", "--top-k", "-1"], "--top-k"),
    (["generate", "--model", "tiny-llama", "-p", "Hi", "--temperature", "nan"], "finite"),
    (["generate", "--model", "tiny-llama", "-p", "Hi", "--temperature", "-1"], ">= 0"),
    (["learn", "surfaces", "--model", "tiny-llama", "--out", "OUT", "--save-dtype", "int8", "--steps", "2"],
     "storage dtype must be one of float32, float16, bfloat16 (got int8)"),
    (["learn", "surfaces", "--model", "tiny-llama", "--out", "OUT", "--range", "2", "2", "--steps", "2"],
     "lo < hi"),
    (["learn", "surfaces", "--model", "tiny-llama", "--out", "OUT", "--grid", "0", "--steps", "2"], "grid size"),
    (["learn", "surfaces", "--model", "tiny-llama", "--out", "OUT", "--text", "nope.txt", "--steps", "2"],
     "neither a corpus split"),
    (["learn", "surfaces", "--model", "tiny-llama", "--out", "OUT", "--layers", "x-y", "--steps", "2"],
     "bad layer spec"),
    (["learn", "surfaces", "--model", "tiny-llama", "--out", "OUT", "--lr", "nan", "--steps", "2"], "lr"),
])
def test_bad_options_refused_before_any_model_is_loaded(monkeypatch, capsys, tmp_path, no_model, args, needle):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    _one_line_exit_2(code, err)
    assert needle in err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("content,needle", [
    ('{"prompts": 5}', "holds no list of prompts"),
    ('{"other": ["a"]}', "holds no list of prompts"),
    ('["ok", 3]', "item 1 is not a non-empty prompt"),
    ('{"prompts": [{"category": "x"}]}', "item 0"),
    ("this is not json", "is not valid JSON"),
])
def test_bad_prompts_files_name_the_file(monkeypatch, capsys, tmp_path, no_model, content, needle):
    f = tmp_path / "prompts.json"
    f.write_text(content)
    code, _, err = run_cli(monkeypatch, capsys, "compare", "--model", "tiny-llama", "--prompts-file", str(f))
    _one_line_exit_2(code, err)
    assert needle in err and str(f) in err


def test_edit_values_get_clean_messages(monkeypatch, capsys, tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    bank = manifold.install(model)
    manifold.uninstall(model)
    src = manifold.save(bank, tmp_path / "s")
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    for op, needle in [("wall layer=1 top=abc", "top wants a whole number"), ("scale=abc layer=1", "'abc' is not a"),
                       ("zero layer=1 head=x", "'x' is not an index"), ("zero layer=0-99999999", "too long")]:
        code, _, err = run_cli(monkeypatch, capsys, "manifold", "edit", op, "--surfaces", str(src), "--out",
                               str(src))
        _one_line_exit_2(code, err)
        assert needle in err and "invalid literal" not in err
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before


# ----------------------------------------------------------------------------- generation limits
def test_generate_temperature_zero_is_greedy(monkeypatch, capsys):
    runs = {}
    for name, extra in [("greedy", []), ("t0", ["--temperature", "0"]), ("t0s", ["--sample", "--temperature", "0"]),
                        ("t1", ["--temperature", "1.5", "--seed", "3"])]:
        code, out, err = run_cli(monkeypatch, capsys, "generate", "--model", "tiny-llama", "-p", "The cat",
                                 "--max-new-tokens", "12", "--json", *extra)
        assert code == 0, err
        runs[name] = json.loads(out)
    assert runs["t0"]["token_ids"] == runs["greedy"]["token_ids"] == runs["t0s"]["token_ids"]
    assert runs["t0"]["greedy"] is True and runs["t1"]["greedy"] is False
    assert runs["t1"]["token_ids"] != runs["greedy"]["token_ids"]  # T = 1.5 really samples


def test_generate_caps_max_new_tokens_at_the_context(monkeypatch, capsys, tiny_model):
    from geosteer.eval.generation import prompt_ids
    from geosteer.models import tiny

    _, tok = tiny_model("llama")
    limit = 24  # a context of 24 positions for the tiny Llama the command builds: the cap, not 512 decode steps
    cls_name, kwargs = tiny.TINY_FAMILIES["llama"]
    monkeypatch.setitem(tiny.TINY_FAMILIES, "llama", (cls_name, {**kwargs, "max_position_embeddings": limit}))
    n_prompt = prompt_ids(tok, "The cat").shape[1]
    code, out, err = run_cli(monkeypatch, capsys, "generate", "--model", "tiny-llama", "-p", "The cat",
                             "--max-new-tokens", "100000000", "--json")
    assert code == 0, err
    assert f"capped at {limit - n_prompt}" in err and f"{limit} positions" in err
    assert len(json.loads(out)["token_ids"]) <= limit - n_prompt
    code, _, err = run_cli(monkeypatch, capsys, "generate", "--model", "tiny-llama", "-p", "word " * (limit + 5))
    _one_line_exit_2(code, err)
    assert "fills the model's context" in err


# ----------------------------------------------------------------------------- bounded reading for ppl
TRICKY = ("Line one ends here.\nSecond line\n\nafter a blank line  \n  indented line\r\nCRLF line, 数字 123 and "
          "émojis 😀😀 across bytes.\n\tTabbed\n" + "word " * 50 + "\n")


@pytest.mark.parametrize("chunk", [7, 64, 1000, 1 << 16])
def test_encode_file_equals_whole_tokenisation(tmp_path, tiny_model, chunk, monkeypatch):
    _, tok = tiny_model("llama")  # the bundled SmolLM2 tokenizer
    from geosteer.data.corpus import split_text

    text = (TRICKY * 3 + split_text("heldout")[:30000] + TRICKY).replace("\n\n\n", "\n\n")
    f = tmp_path / "t.txt"
    f.write_text(text, encoding="utf-8")
    monkeypatch.setattr(textfile, "_CHECK", 32)
    monkeypatch.setattr(textfile, "_MAX_SPACE_SCAN", 500)  # exercise the space cuts too
    whole = encode(tok, text)
    got = encode_file(tok, f, chunk_bytes=chunk)
    assert torch.equal(got, whole)
    for m in (2, 37, 1000, len(whole) + 10):
        assert torch.equal(encode_file(tok, f, max_tokens=m, chunk_bytes=chunk), whole[:m])


def test_encode_file_reads_only_what_max_tokens_needs(tmp_path, tiny_model):
    _, tok = tiny_model("llama")
    f = tmp_path / "t.txt"
    good = ("The river flows through the valley.\n" * 4000).encode()  # > 2 chunks
    f.write_bytes(good + b"\xff\xfe broken bytes far after the prefix\n")
    ids = encode_file(tok, f, max_tokens=100)
    assert torch.equal(ids, encode(tok, good.decode())[:100])
    with pytest.raises(Exception, match="UTF-8"):
        encode_file(tok, f)  # the whole file is still checked when it is all needed
    (tmp_path / "blank.txt").write_text(" \n\n  ")
    with pytest.raises(Exception, match="empty"):
        encode_file(tok, tmp_path / "blank.txt", max_tokens=10)


def test_ppl_text_file_matches_in_memory_perplexity(monkeypatch, capsys, tmp_path, tiny_model):
    model, tok = tiny_model("llama")
    text = "The mill by the river grinds the grain.\nIn spring the river floods the fields.\n" * 60
    f = tmp_path / "t.txt"
    f.write_text(text)
    code, out, err = run_cli(monkeypatch, capsys, "ppl", "--model", "tiny-llama", "--text-file", str(f),
                             "--context", "64", "--stride", "32", "--max-tokens", "300", "--json")
    assert code == 0, err
    d = json.loads(out)
    ref = strided_perplexity(model, tok, text, context=64, stride=32, max_tokens=300)
    assert d["tokens"] == ref.tokens and math.isclose(d["ppl"], ref.ppl, rel_tol=1e-6)


# ----------------------------------------------------------------------------- refused before the model loads
@pytest.mark.parametrize("args,needle", [
    (["ppl", "-m", "tiny-gpt2", "--corpus", "heldout", "--context", "1024", "--stride", "512"],
     "--context 1024 is longer than the model's 512 positions"),
    (["ppl", "-m", "tiny-llama", "--corpus", "heldout", "--context", "1024", "--stride", "512"],  # RoPE: was silent
     "--context 1024 is longer than the model's 512 positions"),
    (["compare", "-m", "tiny-llama", "-p", "Hi", "--seeds", "1000000000"], "less than or equal to 1000"),
    (["generate", "-m", "tiny-llama", "-p", "caf\udcff"], "--prompt is not valid UTF-8"),  # argv byte 0xff
    (["generate", "-m", "tiny-llama", "-p", "Hi", "--top-k", "abc"], "'--top-k'"),
    (["ppl", "-m", "tiny-llama", "--corpus", "heldout", "--dtype", "int8"], "unknown dtype 'int8'"),
    (["generate", "-m", "tiny-llama"], "Missing option '--prompt'"),  # click's usage errors: one line too
    (["ppl", "-m", "tiny-llama", "--text-file", "/dev/null"], "--text-file is not a file"),
])
def test_eval_verbs_refuse_before_any_weights_are_built(monkeypatch, capsys, tmp_path, args, needle):
    from tests.cli_helpers import refused_before_load

    monkeypatch.chdir(tmp_path)
    assert needle in refused_before_load(monkeypatch, capsys, *args)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("unit", ["abcdefghij", "数字漢字語"])  # ASCII, and 3-byte CJK, without any line break
def test_encode_file_is_bounded_without_newlines_or_spaces(tmp_path, monkeypatch, unit):
    """An 8 MB single-line file with max_tokens 256: a few hundred KB are read and no tokenizer call sees more
    than the pending cap; the tokens decode to the file's first characters, in order."""
    import builtins
    import random

    from geosteer.models.tokenizers import smollm2_tokenizer

    tok = smollm2_tokenizer()  # the tokenizer alone: no model needed
    rng = random.Random(0)
    text = "".join(rng.choices(unit, k=1 << 16)) * ((8 << 20) // (len(unit[0].encode()) << 16))  # 8 MB
    f = tmp_path / "noline.txt"
    f.write_text(text, encoding="utf-8")
    read, longest = [0], [0]
    real_open, real_call = builtins.open, type(tok).__call__

    class Counted:
        def __init__(self, fh):
            self.fh = fh

        def read(self, n=-1):
            data = self.fh.read(n)
            read[0] += len(data)
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    def spy_call(self, text, *a, **k):
        longest[0] = max(longest[0], len(text))
        return real_call(self, text, *a, **k)

    monkeypatch.setattr(textfile, "open", lambda p, mode="r": Counted(real_open(p, mode)), raising=False)
    monkeypatch.setattr(type(tok), "__call__", spy_call)
    ids = encode_file(tok, f, max_tokens=256)
    assert len(ids) == 256
    assert read[0] <= 4 * textfile._MAX_PENDING + 2 * textfile.CHUNK_BYTES < len(text.encode()) // 4
    assert longest[0] <= textfile._MAX_PENDING + textfile.CHUNK_BYTES
    decoded = tok.decode(ids, skip_special_tokens=True).rstrip("\ufffd")  # a byte token may end mid-character
    assert len(decoded) > 100 and text.startswith(decoded)
