"""Locally generated lm-eval tasks (geosteer.tasks): determinism, lengths, answers, scorer, bad input,
and an offline lm-eval run where geosteer with a neutral recipe scores exactly as the stock ``hf`` model."""

import json
import os
import re
from collections import Counter

import pytest

from geosteer.errors import GeosteerError
from geosteer.tasks import build as B
from geosteer.tasks import proxies, ruler
from geosteer.tasks.lm_eval_glue import ruler_results

L = 384  # tiny models: max_position_embeddings 512
SMALL = dict(model="tiny-llama", lengths=[L], ruler_n=2, proxy_n=6)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("tasks")
    m = B.build(d / "a", seed=0, **SMALL)
    return d, m


def _rows(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_same_seed_byte_identical_other_seed_differs(built):
    d, m = built
    B.build(d / "b", seed=0, **SMALL)
    B.build(d / "c", seed=1, **SMALL)
    names = sorted(p.name for p in (d / "a").iterdir())
    assert names == sorted(p.name for p in (d / "b").iterdir())
    assert len([n for n in names if n.endswith(".jsonl")]) == len(ruler.TASKS) + len(proxies.PROXIES)
    for n in names:
        assert (d / "a" / n).read_bytes() == (d / "b" / n).read_bytes(), n
    differ = [n for n in names if n.endswith(".jsonl") and (d / "a" / n).read_bytes() != (d / "c" / n).read_bytes()]
    assert len(differ) == len(ruler.TASKS) + len(proxies.PROXIES)


def test_examples_fit_and_contain_their_answers(built):
    d, _ = built
    tok, limit = B.tokenizer_and_limit("tiny-llama")
    assert limit == 512
    for t in ruler.TASKS:
        for doc in _rows(d / "a" / f"geosteer_ruler_{t}_{L}.jsonl"):
            n = len(tok(doc["input"], add_special_tokens=False).input_ids)
            assert n + doc["max_new_tokens"] < L and n > L // 2, (t, n)
            text = doc["input"]
            if t == "fwe":  # the answers are the three most frequent coded words, strictly
                body = text.split("coded words. ", 1)[1].split("\nQuestion:")[0].split()
                top = Counter(body).most_common(4)
                assert [w for w, _ in top[:3]] == doc["outputs"] and top[2][1] > top[3][1]
            elif t == "cwe":
                body = re.findall(r"\d+\. ([a-z]+)", text)
                counts = Counter(body)
                rest = max(c for w, c in counts.items() if w not in doc["outputs"])
                assert min(counts[w] for w in doc["outputs"]) > rest
            elif t == "vt":
                value = re.search(r"assigned the value (\d+) in", text).group(1)
                names, cur = [], value
                for a, b in re.findall(r"VAR (\w+) = (VAR \w+|\d+)\.", text):  # follow the chain
                    if b in (cur, f"VAR {cur}") or (names and b == f"VAR {names[-1]}"):
                        names.append(a)
                assert names == doc["outputs"]
            else:
                for v in doc["outputs"]:
                    assert f" is: {v}." in text
                q = text.rsplit("\n", 1)[1]
                assert all(f"is: {v}" not in q for v in doc["outputs"])  # the question does not leak it


def test_proxies_have_one_true_choice(built):
    d, _ = built
    for doc in _rows(d / "a" / "geosteer_proxy_cloze.jsonl"):
        assert len(doc["choices"]) == 4 and len(set(doc["choices"])) == 4
    for doc in _rows(d / "a" / "geosteer_proxy_nextsent.jsonl"):
        assert len(set(doc["choices"])) == 4 and doc["choices"][doc["answer"]] not in doc["context"]


def test_fact_proxy_cannot_be_copied_and_distractors_match_the_kind():
    docs = proxies.generate("proxy_fact", 60, seed=3)
    assert len(docs) == 60 and {d["kind"] for d in docs} == {"year", "name"}
    for doc in docs:
        true = doc["choices"][doc["answer"]]
        assert len(set(doc["choices"])) == 4
        assert true.lower() not in doc["context"].lower()  # recall, not copying
        assert len(doc["context"].split()) >= 4
        if doc["kind"] == "year":
            assert all(c.isdigit() and abs(int(c) - int(true)) <= 60 for c in doc["choices"])
        else:
            assert all(c[0].isupper() and c.isalpha() for c in doc["choices"])
    assert proxies.generate("proxy_fact", 60, seed=3) == docs  # deterministic
    assert proxies.generate("proxy_fact", 60, seed=4) != docs


@pytest.mark.parametrize("pred,refs,all_,part", [
    ("The special magic number is 1234567.", ["1234567"], 1.0, 1.0),
    ("the numbers are 111, 222 and 999", ["111", "222", "333", "444"], 0.5, 1.0),
    ("VAR abcde, Fghij", ["ABCDE", "FGHIJ", "KLMNO"], 2 / 3, 1.0),
    ("nothing here", ["42"], 0.0, 0.0),
    ("", ["x", "y"], 0.0, 0.0),
])
def test_scorers_on_hand_made_answers(pred, refs, all_, part):
    assert ruler.string_match_all(pred, refs) == pytest.approx(all_)
    assert ruler.string_match_part(pred, refs) == part
    assert ruler_results({"outputs": refs}, [pred]) == {"score": pytest.approx(all_)}
    assert ruler_results({"outputs": refs, "metric": "part"}, [pred]) == {"score": part}


@pytest.mark.parametrize("kw,msg", [
    (dict(ruler_tasks=["niah_single_9"]), "unknown RULER-style task"),
    (dict(ruler_tasks=["qa_1"]), "QA tasks"),
    (dict(proxy_tasks=["hellaswag"]), "unknown proxy task"),
    (dict(lengths=[1024]), "above tiny-llama's limit"),
    (dict(model="tiny-nope"), "unknown tiny model"),
])
def test_bad_input_one_line_error(tmp_path, kw, msg):
    args = dict(SMALL, **kw)
    with pytest.raises(GeosteerError, match=msg):
        B.build(tmp_path / "x", **args)
    assert not (tmp_path / "x").exists()


def test_main_exit_2_one_line(tmp_path, capsys):
    rc = B.main(["--out", str(tmp_path / "x"), "--model", "tiny-llama", "--lengths", "4096"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: context length 4096") and err.count("\n") == 1


def test_geosteer_tasks_build_cli_same_bytes_as_the_library(tmp_path, built, monkeypatch, capsys):
    """`geosteer tasks build` writes exactly what build() writes; bad input is one line, exit 2."""
    import sys

    from geosteer import cli

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["geosteer", "tasks", "build", *args])
        try:
            cli.main()
            code = 0
        except SystemExit as e:
            code = e.code or 0
        return code, capsys.readouterr()

    code, out = run("--out", str(tmp_path / "c"), "--model", "tiny-llama", "--lengths", str(L),
                    "--ruler-n", "2", "--proxy-n", "6", "--json")
    assert code == 0, out.err
    assert json.loads(out.out)["tasks"] == built[1]["tasks"]
    for f in (built[0] / "a").glob("*.jsonl"):
        assert (tmp_path / "c" / f.name).read_bytes() == f.read_bytes()
    for args, msg in [(["--lengths", "a,b"], "--lengths takes integers"), (["--ruler-n", "0"], "must be >= 1"),
                      (["--lengths", "4096"], "above tiny-llama's limit")]:
        code, out = run("--out", str(tmp_path / "d"), "--model", "tiny-llama", *args)
        assert code == 2 and msg in out.err and len(out.err.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


# ------------------------------------------------------------------------------ lm-eval, offline
def test_neutral_geosteer_equals_stock_hf_on_generated_tasks(tmp_path):
    pytest.importorskip("lm_eval")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import lm_eval
    from lm_eval.tasks import TaskManager

    import geosteer.integrations.lm_eval  # noqa: F401  (registers --model geosteer)
    from geosteer.models.tiny import tiny_model

    m, tok = tiny_model("llama")
    m.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    B.build(tmp_path / "tasks", model="tiny-llama", lengths=[256], ruler_tasks=["niah_single_2"], ruler_n=2,
            proxy_tasks=["proxy_cloze"], proxy_n=6, seed=0)
    tm = TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False)
    names = ["geosteer_ruler_niah_single_2_256", "geosteer_proxy_cloze"]
    args = dict(pretrained=str(tmp_path / "model"), dtype="float32", device="cpu", batch_size=2)

    def run(model, **extra):
        return lm_eval.simple_evaluate(model=model, model_args=dict(args, **extra), tasks=names, task_manager=tm,
                                       bootstrap_iters=0, log_samples=True, random_seed=0)

    def resps(res, task):
        return [s["resps"] for s in res["samples"][task]]

    stock = run("hf")
    neutral = run("geosteer", scale_site="value_exclude_self", scale_par=1.0, scale_perp=1.0)
    edited = run("geosteer", scale_site="value_exclude_self", scale_par=0.0)
    assert len(resps(stock, names[0])) == 2 and len(resps(stock, names[1])) == 6
    gen = [r[0][0] for r in resps(stock, names[0])]
    assert all(isinstance(g, str) for g in gen)
    assert [r[0][0] for r in resps(neutral, names[0])] == gen  # greedy generations identical
    lls = [c[0][0] for r in resps(stock, names[1]) for c in r]
    lls_n = [c[0][0] for r in resps(neutral, names[1]) for c in r]
    assert lls_n == pytest.approx(lls, rel=1e-5, abs=1e-4)
    for t in names:
        for k, v in stock["results"][t].items():
            if isinstance(v, float):
                assert neutral["results"][t][k] == pytest.approx(v, rel=1e-5), (t, k)
    lls_e = [c[0][0] for r in resps(edited, names[1]) for c in r]
    assert max(abs(a - b) for a, b in zip(lls_e, lls, strict=True)) > 1e-3  # the recipe acts


def test_build_never_replaces_a_folder_it_did_not_build(tmp_path, built):
    from geosteer.errors import OutputRefused

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.txt").write_text("precious")
    with pytest.raises(OutputRefused, match="not a geosteer output folder.*thesis.txt"):
        B.build(victim, **SMALL)
    assert [p.name for p in victim.iterdir()] == ["thesis.txt"] and (victim / "thesis.txt").read_text() == "precious"
    # a task folder built before is replaced (lm-eval's __pycache__ beside utils.py is geosteer's too) ...
    import shutil

    again = shutil.copytree(built[0] / "a", tmp_path / "again")
    (again / "__pycache__").mkdir()
    B.build(again, **SMALL)
    assert sorted(p.name for p in again.iterdir()) == sorted(p.name for p in (built[0] / "a").iterdir())
    # ... unless the user put files of their own into it
    (again / "my_results.json").write_text("{}")
    with pytest.raises(OutputRefused, match="my_results.json"):
        B.build(again, **SMALL)
    assert (again / "my_results.json").read_text() == "{}"
