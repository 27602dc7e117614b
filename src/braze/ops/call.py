"""Ops that carry a sub-graph or pick one result of a multi-result op.

``composite`` records a named composite op: eagerly it runs the composite's
Python body; in a graph it is one node whose ``body`` param is the traced
sub-graph (see ``braze.composite``). ``pick`` reads result ``index`` of a
node with several results.
"""
from __future__ import annotations

from ..core import declare


def _composite_abstract(*avals, **params):
    raise AssertionError("composite nodes get their avals from tracing the body")


def _composite_impl(*args, composite, attrs):
    return composite.fn(*args, **dict(attrs))


def _pick_abstract(x, *, index):
    return x[index]


def _pick_impl(x, *, index):
    return x[index]


declare("composite", "call", abstract=_composite_abstract, impl=_composite_impl)
declare("pick", "call", abstract=_pick_abstract, impl=_pick_impl)
