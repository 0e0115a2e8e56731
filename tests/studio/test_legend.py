"""The studio page explains its symbols: a legend for the colours, token dots, control points and walls."""

from __future__ import annotations

import re


def test_the_page_has_a_legend_for_every_symbol(studio_env):
    html = studio_env("legend", keep=False)["client"].get("/").text
    legend = re.search(r"<details id=\"legend\".*?</details>", html, re.S)
    assert legend, "no legend on the page"
    text = re.sub(r"<[^>]+>", " ", legend.group(0))
    for needle in ("red", "amplified", "blue", "attenuated", "S = −1", "tokens", "Control net", "control point",
                   "grid wall", "Exact walls", "KL"):
        assert needle in text, needle
    # the colours named are those of the figures' scale (RdBu reversed: red high, blue low)
    from geosteer.viz.figures import COLORSCALE

    assert COLORSCALE == "RdBu_r"
