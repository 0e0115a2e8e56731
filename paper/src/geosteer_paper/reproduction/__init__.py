"""The reproduction report: every item of the three papers, its paper value, geosteer's value read from a
results file, and a status computed from its criteria (reproduces / partial / diverges / inconclusive / goes
beyond / definition / not run)."""

from geosteer_paper.reproduction.evaluate import ItemResult, evaluate_item, evaluate_items
from geosteer_paper.reproduction.items import Criterion, Item, PaperItems, Query, load_items, load_paper
from geosteer_paper.reproduction.report import report_html, report_json, report_markdown

__all__ = ["Criterion", "Item", "ItemResult", "PaperItems", "Query", "evaluate_item", "evaluate_items",
           "load_items", "load_paper", "report_html", "report_json", "report_markdown"]
