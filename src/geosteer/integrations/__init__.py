"""Integrations with the tools researchers already use.

- :mod:`geosteer.integrations.lm_eval`: the lm-evaluation-harness model type ``geosteer`` (extra ``eval``).
"""
