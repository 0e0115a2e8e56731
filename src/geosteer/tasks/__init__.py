"""Locally generated evaluation tasks for lm-evaluation-harness (no download).

- :mod:`geosteer.tasks.ruler`: RULER-style long-context retrieval (needle-in-a-haystack variants,
  variable tracking, common/frequent words extraction) on held-out corpus haystacks, with RULER's
  ``string_match_all`` / ``string_match_part`` scorers.
- :mod:`geosteer.tasks.proxies`: zero-shot multiple-choice *proxy* tasks built from the held-out corpus
  (last-word cloze, next sentence). They are proxies, not the standard benchmarks.
- :mod:`geosteer.tasks.build`: ``python -m geosteer.tasks.build --out DIR ...`` writes the data files and
  the task YAMLs into a folder for ``geosteer eval --include_path DIR``.
"""
