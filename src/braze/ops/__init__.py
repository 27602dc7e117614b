"""Primitive ops, declared family by family into the tables of ``braze.core``.

Importing this package declares every primitive; ``core.missing_rules()``
then says whether each op has every rule it needs.
"""
from . import elementwise, reduce, shape, index, linalg, call  # noqa: F401  (declares)
