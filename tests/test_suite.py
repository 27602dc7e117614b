"""The whole-program suite (``braze bench --suite programs``): every program
compiles with braze and agrees with NumPy, so does its hand-written numba
version, the jax ports are complete, and the step profile adds up."""
import copy
import subprocess
import sys

import numpy as np
import pytest

import braze
from braze.suite import numba_loops
from braze.suite.programs import PROGRAMS
from braze.suite.run import check, markdown, merge


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_braze_and_the_hand_written_numba_agree_with_numpy(name):
    prog = PROGRAMS[name]
    args = prog.make(prog.sizes["tiny"])
    want = prog.fn(*copy.deepcopy(args), **prog.static)
    f = braze.compile(prog.fn, target="cpu", static_argnames=tuple(prog.static))
    check(f(*copy.deepcopy(args), **prog.static), want, prog.rtol)
    check(getattr(numba_loops, name)(*copy.deepcopy(args), **prog.static), want, prog.rtol)


def test_a_wrong_implementation_fails_the_check():
    prog = PROGRAMS["black_scholes"]
    args = prog.make(50)
    call, put = prog.fn(*args)
    with pytest.raises(AssertionError):
        check((call, put * (1 + 1e-6)), (call, put), prog.rtol)
    # the values to 1e-7 but in float32: half the work, not NumPy's program
    with pytest.raises(AssertionError, match="dtype float32, NumPy's float64"):
        check((call, put.astype(np.float32)), (call, put), 1e-5)


def test_every_program_has_a_jax_port_or_says_why():
    from braze.suite import jax_ports

    assert set(jax_ports.PORTED) | set(jax_ports.NOT_MECHANICAL) == set(PROGRAMS)
    assert not set(jax_ports.PORTED) & set(jax_ports.NOT_MECHANICAL)
    jax = pytest.importorskip("jax", reason="jax is not installed (the ports themselves need it)")
    jax.config.update("jax_enable_x64", True)  # (as the suite runs them: float64 programs stay float64)
    ports = jax_ports.ports()
    for name in jax_ports.PORTED:
        prog = PROGRAMS[name]
        args = prog.make(prog.sizes["tiny"])
        want = prog.fn(*copy.deepcopy(args), **prog.static)
        check(ports[name](*args, **prog.static), want, max(prog.rtol, 1e-12))


def test_profile_times_each_step_by_kind(monkeypatch):
    from braze.targets import cpu_driver

    monkeypatch.setenv("BRAZE_PROFILE", "1")
    monkeypatch.setenv("BRAZE_TIERED", "0")
    x, w = np.ones((64, 32)), np.ones((32, 16))
    f = braze.compile(lambda x, w: np.tanh(x @ w) + 1.0, target="cpu")
    before = len(cpu_driver.PROFILES)
    for _ in range(3):
        f(x, w)
    (prof,) = cpu_driver.PROFILES[before:]
    assert prof.calls == 3 and set(prof.kinds) == {"BLAS/LAPACK", "kernel"}
    by = prof.by_kind()
    assert all(v >= 0 for v in by.values()) and by["kernel"] > 0 and by["BLAS/LAPACK"] > 0
    assert sum(by.values()) == pytest.approx(prof.total / 3)


def test_bench_suite_command_runs_and_writes_the_table(tmp_path):
    out = tmp_path / "PROGRAMS.md"
    proc = subprocess.run([sys.executable, "-m", "braze", "bench", "--suite", "programs", "--tiny", "--peers", "numba",
                           "--programs", "eos_unesco,black_scholes", "--markdown", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = out.read_text()
    for name in ("eos_unesco", "black_scholes"):
        for impl in ("numpy", "braze", "numba"):
            assert f"| {name} | {impl} | " in text
    assert "skipped" not in text and "geomean" in text and "STREAM triad" in text


def test_markdown_reports_a_skipped_peer():
    report = {"programs": ["eos_unesco"], "size": "tiny", "impls": ["numpy", "braze", "torch"], "threads": ["all"],
              "triad_gbps": {"all": 10.0}, "unavailable": {}, "profile": {},
              "rows": {"eos_unesco": {"numpy": {"all": {"median_s": 2e-3, "first_s": 0.0, "bytes": 1e6}},
                                      "braze": {"all": {"median_s": 1e-3, "first_s": 0.1, "bytes": 1e6}},
                                      "torch": {"all": {"skipped": "Unsupported: x"}}}}}
    text = markdown(report, "cmd")
    assert "| eos_unesco | braze | 1.00 | 2.00x |" in text and "skipped: Unsupported: x" in text


def test_rounds_keep_each_programs_best_median_and_the_first_call_of_the_first():
    report = {"rows": {}, "triad_gbps": {}}
    merge(report, "braze", "all", {"triad_gbps": 40.0, "rows": {"a": {"median_s": 3.0, "first_s": 0.5},
                                                                "b": {"skipped": "x"}}})
    merge(report, "braze", "all", {"triad_gbps": 45.0, "rows": {"a": {"median_s": 2.0, "first_s": 0.01},
                                                                "b": {"median_s": 1.0, "first_s": 0.2}}})
    merge(report, "braze", "all", {"triad_gbps": 42.0, "rows": {"a": {"median_s": 2.5, "first_s": 0.02}}})
    assert report["rows"]["a"]["braze"]["all"] == {"median_s": 2.0, "first_s": 0.5}
    assert report["rows"]["b"]["braze"]["all"]["median_s"] == 1.0 and report["triad_gbps"]["all"] == 45.0
