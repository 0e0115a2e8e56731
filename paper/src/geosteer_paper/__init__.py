"""The papers' experiments on geosteer, kept out of the installed library.

It adds ``geosteer study`` to the ``geosteer`` command (through the ``geosteer.cli`` entry-point group): each
method's studies (``geosteer study <method> <name>``), the formula checks (``geosteer study checks``) and the
reproduction report (``geosteer study report``). Studies and checks are declared per method in
``geosteer_paper.<method>`` (:mod:`geosteer_paper.registry`)."""

from geosteer_paper.registry import Check, Study, checks, register_check, register_paper, register_study, studies

__all__ = ["Check", "Study", "checks", "register_check", "register_paper", "register_study", "studies"]
