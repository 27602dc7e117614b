"""Helpers for testing braze code with pytest."""
from __future__ import annotations

from .verify import Report, verify


def check_kernel(name: str, target: str | None = None) -> list[Report]:
    """Assert that every kernel registered for ``name`` (on ``target``) matches
    its composite's body on the composite's examples; return the reports."""
    reports = verify(name, target)
    assert reports, f"no registered kernel for {name}" + (f" on {target}" if target else "")
    bad = [str(r) for r in reports if not r.ok]
    assert not bad, "kernels disagree with their composite's body:\n" + "\n".join(bad)
    return reports
