"""Prompts and texts are encoded as each model's tokenizer encodes them (its own BOS convention), with an
explicit option to put BOS first: checked against the tokenizer itself and HF's own ``generate``."""

from __future__ import annotations

import copy

import pytest
import torch
from typer.testing import CliRunner

from geosteer.eval.generation import generate, prompt_ids
from geosteer.eval.perplexity import encode
from geosteer.eval.textfile import encode_file
from geosteer.models.tokenizers import adds_bos, gpt2_tokenizer, smollm2_tokenizer

PROMPTS = ["Photosynthesis converts light energy into", "The capital of France is"]


def _bos_tokenizer():
    """SmolLM2's tokenizer told to put its BOS first (as Llama-2 and Gemma tokenizers do)."""
    from tokenizers.processors import TemplateProcessing

    tok = copy.deepcopy(smollm2_tokenizer())
    bos = tok.bos_token
    tok._tokenizer.post_processor = TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                       special_tokens=[(bos, tok.bos_token_id)])
    return tok


TOKENIZERS = {"smollm2": smollm2_tokenizer, "gpt2": gpt2_tokenizer, "bos-first": _bos_tokenizer}


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_default_encoding_is_the_tokenizers_own(name, tmp_path):
    tok = TOKENIZERS[name]()
    own = tok(PROMPTS[0])["input_ids"]
    assert adds_bos(tok) == (name == "bos-first") == (own[0] == tok.bos_token_id)
    for p in PROMPTS:
        assert prompt_ids(tok, p)[0].tolist() == tok(p)["input_ids"]
        assert encode(tok, p).tolist() == tok(p)["input_ids"]
    f = tmp_path / "t.txt"
    f.write_text(PROMPTS[0], encoding="utf-8")
    assert encode_file(tok, f).tolist() == own


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_explicit_bos_puts_one_bos_first_and_false_puts_none(name):
    tok = TOKENIZERS[name]()
    bare = tok(PROMPTS[0], add_special_tokens=False)["input_ids"]
    assert prompt_ids(tok, PROMPTS[0], add_bos=True)[0].tolist() == [tok.bos_token_id, *bare]
    assert encode(tok, PROMPTS[0], add_bos=True).tolist() == [tok.bos_token_id, *bare]
    assert prompt_ids(tok, PROMPTS[0], add_bos=False)[0].tolist() == bare


def test_generate_continues_the_tokenizers_encoding_as_hf_generate_does(tiny_model):
    model, tok = tiny_model("llama")
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt").input_ids
        with torch.no_grad():
            ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                                 pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
        assert generate(model, tok, p, 6).token_ids == ref


def test_cli_bos_option_adds_one_token(tmp_path):
    import json

    from geosteer.cli import app

    f = tmp_path / "t.txt"
    f.write_text(" ".join(PROMPTS * 12), encoding="utf-8")
    n = len(smollm2_tokenizer()(f.read_text())["input_ids"])
    args = ["ppl", "--model", "tiny-llama", "--text-file", str(f), "--context", "32", "--stride", "16", "--json"]
    runner = CliRunner()
    plain, bos = (runner.invoke(app, args + extra) for extra in ([], ["--bos"]))
    assert plain.exit_code == 0 and bos.exit_code == 0, plain.output + bos.output
    assert json.loads(plain.stdout)["tokens"] == n - 1  # every token after the first is scored
    assert json.loads(bos.stdout)["tokens"] == n


def test_compare_encodes_prompts_as_asked(tiny_model):
    from geosteer.eval.compare import compare_states

    model, tok = tiny_model("llama")
    for add_bos in (None, True):
        row = compare_states(model, tok, [PROMPTS[0]], max_new_tokens=4, add_bos=add_bos)[0]
        assert row["text_a"] == generate(model, tok, PROMPTS[0], 4, add_bos=add_bos).text
