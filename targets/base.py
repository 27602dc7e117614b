"""The protocol every target implements."""
from __future__ import annotations

from typing import Callable, Sequence

from braze.core import NUMPY_IMPL
from braze.graph import Graph


class SlotLayout:
    """Where each value of a graph lives while it runs: one list slot per node;
    inputs first, then constants and captures (filled at every call), then
    the values the steps compute."""

    def __init__(self, graph: Graph):
        self.slot_of: dict[int, int] = {id(node): i for i, node in enumerate(graph.inputs)}
        self.consts: list[tuple[int, object]] = []
        self.captures: list[tuple[int, int]] = []
        n = len(graph.inputs)
        for node in graph.nodes:
            if id(node) in self.slot_of:
                continue
            if node.op == "input":
                raise AssertionError("input node not among the graph's inputs")
            self.slot_of[id(node)] = n
            if node.op == "const":
                self.consts.append((n, node.kw["value"].value))
            elif node.op == "capture":
                self.captures.append((n, node.kw["index"]))
            n += 1
        self.nslots = n
        self.ninputs = len(graph.inputs)
        self.graph_captures = graph.captures

    def fill(self, inputs) -> list:
        """A fresh slot list holding the inputs, constants and captured arrays."""
        slots = [None] * self.nslots
        slots[: self.ninputs] = inputs
        for i, value in self.consts:
            slots[i] = value
        for i, k in self.captures:
            slots[i] = self.graph_captures[k]
        return slots


def numpy_loop(loop, slot_of: dict, load: Callable = lambda v: v, store: Callable = lambda v: v):
    """A runner evaluating a fused loop's members op by op with NumPy (the
    generic target's rule table), for loops a compiling target does not
    generate code for (float16). ``load``/``store`` move values between the
    target's slots and NumPy (the cuda target: device to host and back)."""
    plan = [(id(m), NUMPY_IMPL[m.op], [(id(i), slot_of.get(id(i)), i) for i in m.inputs], m.kw)
            for m in loop.members]
    outs = [(id(o), slot_of[id(o)]) for o in loop.outputs]

    def run(slots):
        values = {}
        for key, fn, ins, params in plan:
            # constants as the Python scalars they were (weak: NumPy's promotion keeps float16)
            args = [values[i] if i in values else (n.kw["value"].value if n.op == "const" else load(slots[s]))
                    for i, s, n in ins]
            values[key] = fn(*args, **params)
        for key, slot in outs:
            slots[slot] = store(values[key])

    return run


class Executable:
    """A lowered graph: call it with the flat inputs, get the flat outputs.

    ``plan`` and ``source`` are human-readable descriptions for ``lower()``
    and ``explain`` (``source`` may be given as a function making it, called
    when it is first read: a listing of 100,000 steps is not made per trace).
    """

    def __init__(self, run: Callable[[Sequence], list], plan: str = "", source: str | Callable[[], str] = ""):
        self.run = run
        self.plan = plan
        self._source = source
        self.sites: dict = {}  # composite site path -> kernel name, where the target knows
        self.times: dict = {}  # the target's own stages (seconds), for logs and ``explain``
        self.counts: dict = {}  # e.g. kernels and distinct kernel sources

    @property
    def source(self) -> str:
        if callable(self._source):
            self._source = self._source()
        return self._source

    @source.setter
    def source(self, text: str) -> None:
        self._source = text

    def __call__(self, inputs: Sequence, outs=None) -> list:
        return self.run(inputs) if outs is None else self.run(inputs, outs)


class Target:
    """A place to run graphs. Subclasses implement ``lower``."""

    name = "?"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        from braze.registry import KNOWN_TARGETS

        if cls.name != "?" and cls.name not in KNOWN_TARGETS:  # kernels may be registered for it
            KNOWN_TARGETS.append(cls.name)

    def is_available(self) -> bool:
        return True

    def check_available(self) -> None:
        """Raise ``TargetError`` saying why this target cannot run here."""

    def describe(self) -> str:
        return self.name

    def cache_key(self) -> tuple:
        """What, besides the graph, decides the code this target generates."""
        return (self.name,)

    def lower(self, graph: Graph, donated=frozenset(), mutable=frozenset()) -> Executable:
        """An executable for ``graph``. ``donated``/``mutable``: input indices whose
        buffers the program may overwrite (donated by the caller, or updated in
        place by the function anyway)."""
        raise NotImplementedError

    def __repr__(self):
        return f"<braze target {self.name}>"
