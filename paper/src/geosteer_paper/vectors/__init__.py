"""The paper studies of steering vectors (``geosteer study vectors ...``)."""

from __future__ import annotations

from geosteer_paper.registry import Study, register_paper

STUDIES = (Study("frontier", "geosteer_paper.vectors.studies.frontier:frontier_cmd",
                 "steering frontier: target shift vs control KL per lever and strength"),)

register_paper("vectors", STUDIES)
