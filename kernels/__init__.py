"""``braze.kernels``: the standard library of composite ops and their target kernels.

Empty until the composite library lands (issue 4); the package exists so the
layout and packaging match DESIGN.md from the start.
"""
