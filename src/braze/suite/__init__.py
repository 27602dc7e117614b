"""Whole-program benchmarks (``braze bench --suite programs``); see ``braze.suite.run``."""
