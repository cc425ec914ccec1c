"""Per-request speculation: which (method, k, tree) engine a request runs on."""
from __future__ import annotations

from ..config import SpecConfig
from ..errors import ConfigError
from ..proposers import available as available_methods
from . import protocol as P
from .events import HTTPError


def request_spec(req, cfg, models) -> tuple:
    """(method, k, tree) a request asks for: its `speculative` field over the server's defaults
    (`cfg`: a ServerConfig). HTTPError 400 for a method the server cannot run or a bad k/tree."""
    if req.speculative is not None and not cfg.allow_request_speculation:
        raise HTTPError(400, "per-request speculation is turned off on this server "
                             "(--no-allow-request-speculation)", param="speculative")
    opts = req.speculative or P.SpeculativeOptions()
    method, k = opts.method or cfg.spec.method, cfg.spec.k if opts.k is None else opts.k
    if opts.method is not None and opts.k is None and k == 0 and method != "none":   # asked, k left open
        k = "auto"
    tree = cfg.spec.tree if opts.tree is None else 0 if opts.tree == "off" else opts.tree
    if method == "none" or k == 0:
        return ("none", 0, 0)
    if method not in available_methods():
        raise HTTPError(400, f"unknown speculative method {method!r}; choose one of "
                             f"{', '.join(available_methods())}", param="speculative.method")
    need = {"draft": ("a draft model", models.draft is not None, "--draft DIR"),
            "parallel": ("a draft with a mask token", getattr(models.draft, "mask_token", None) is not None,
                         "--draft DIR (a parallel draft)"),
            "eagle": ("a feature head", getattr(models.head, "source", "") == "eagle", "--head DIR"),
            "mtp": ("MTP layers", getattr(models.head, "source", "") == "mtp", "--method mtp")}.get(method)
    if need is not None and not need[1]:
        raise HTTPError(400, f"speculative method {method!r} needs {need[0]}; start the server with {need[2]}",
                        param="speculative.method")
    try:
        SpecConfig(method=method, k=k, k_max=cfg.spec.k_max, tree=tree)
    except ConfigError as e:
        raise HTTPError(400, str(e), param="speculative.tree" if "tree" in str(e) else "speculative.k")
    return (method, k, tree)
