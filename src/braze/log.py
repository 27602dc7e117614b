"""Logging of traces and compilations, through the standard ``logging`` module.

``BRAZE_LOG=compile`` in the environment, or ``braze.set_log("compile")``,
sends one line per trace and per kernel compilation to stderr, with the
reason (first call, new shape, new dtype, new static value, registry
changed), the time each stage took, and whether kernels came from the disk
cache. The logger is ``logging.getLogger("braze.compile")``; configure it
like any other to send the lines elsewhere.

>>> import braze
>>> braze.set_log(None)  # off again
"""
from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger("braze.compile")
_handler: logging.Handler | None = None


def set_log(what: str | None = "compile") -> None:
    """Turn compile logging on (``"compile"``) or off (``None``)."""
    global _handler
    if what not in (None, "compile"):
        from .errors import BrazeError

        raise BrazeError(f"set_log: unknown log {what!r}; use 'compile' or None")
    if what is None:
        logger.setLevel(logging.WARNING)
        if _handler is not None:
            logger.removeHandler(_handler)
            _handler = None
        return
    logger.setLevel(logging.INFO)
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("braze: %(message)s"))
        logger.addHandler(_handler)


if os.environ.get("BRAZE_LOG") == "compile":
    set_log("compile")
