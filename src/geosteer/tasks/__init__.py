"""Locally generated evaluation tasks for lm-evaluation-harness (no download): RULER-style retrieval
(:mod:`.ruler`), multiple-choice proxies (:mod:`.proxies`, not the standard benchmarks), and the writer
(:mod:`.build`) for ``geosteer eval --include_path DIR`` (docs/tasks.md).
"""
