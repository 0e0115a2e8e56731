"""The instruct-model study's refusal and persona flags, prompt forms and concept sides."""

from __future__ import annotations

from benchmarks.instruct_admission import concept_sides, conditions, flags, formatted


def test_refusals_and_persona_are_flagged():
    assert flags("I'm sorry, but I can't assist with that.")["refusal"]
    assert flags("Unfortunately, I must decline to help with the trip.")["refusal"]
    f = flags("As an AI language model, I don't have personal preferences, but here are some ideas")
    assert f["persona"] and f["as_an_ai"] and not f["refusal"]
    assert not any(flags("Certainly! Here are some tips for your first day:")[k]
                   for k in ("refusal", "persona", "as_an_ai"))


def test_patterns_are_read_in_the_head_only():
    assert not flags("Here is a long answer. " * 10 + "I'm sorry.")["refusal"]


def test_concept_sides_are_decides_instructions():
    sides = concept_sides()
    assert sides == {"positive-sentiment": ("cheerful", "gloomy"), "negative-sentiment": ("gloomy", "cheerful"),
                     "formal": ("formal", "casual"), "refusal": ("refuse", "none")}
    assert conditions()["none"] is None


class _Tok:
    bos_token = None


def test_continuation_forms():
    assert formatted(_Tok(), "plain", "Describe a walk.", "Be formal.") == "Be formal.\n\nDescribe a walk."
    assert formatted(_Tok(), "qa", "Describe a walk.", None) == "Question: Describe a walk.\nAnswer:"
