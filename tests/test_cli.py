"""The braze command line: each subcommand on real inputs."""
import numpy as np
import pytest

from braze import cli

EXAMPLE = """
import numpy as np

def scaled_softmax(x, w):
    z = x * w
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
"""


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_explain_a_function_in_a_file(tmp_path, capsys):
    path = tmp_path / "model.py"
    path.write_text(EXAMPLE)
    code, out, _ = run(capsys, "explain", f"{path}:scaled_softmax", "--shape", "x=64,32:float32",
                       "--shape", "w=32:float32", "--target", "cpu")
    assert code == 0
    assert "graph(%x: f32[64,32], %w: f32[32])" in out
    assert "row kernel over 64x32" in out and "def kernel(" in out


def test_explain_a_bad_shape_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "model.py"
    path.write_text(EXAMPLE)
    code, _, err = run(capsys, "explain", f"{path}:scaled_softmax", "--shape", "x=64,a:float32")
    assert code == 2 and "expected NAME=D0,D1,...:DTYPE" in err


def test_targets_lists_cpu_and_generic_with_details(capsys):
    code, out, _ = run(capsys, "targets")
    assert code == 0 and "generic" in out and "cpu " in out and "threads" in out and "widest SIMD" in out


def test_kernels_lists_the_library(capsys):
    code, out, _ = run(capsys, "kernels")
    assert code == 0 and "braze.nn.softmax: 1 definition(s)" in out and "no registered kernels" in out


def test_cache_info_and_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    import braze

    braze.compile(lambda x: np.exp(x) + 1, target="cpu")(np.ones(3))
    code, out, _ = run(capsys, "cache", "info")
    assert code == 0 and str(tmp_path) in out and "modules_on_disk" in out
    code, out, _ = run(capsys, "cache", "clear")
    assert code == 0 and not list(tmp_path.glob("braze_k_*"))


def test_compile_log(capsys, tmp_path, monkeypatch):
    import braze

    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    braze.set_log("compile")
    try:
        f = braze.compile(lambda x: np.tanh(x) * 3.0, target="cpu")
        f(np.ones(4))
        f(np.ones(6))
        f(np.ones(6, np.float32))
    finally:
        braze.set_log(None)
    err = capsys.readouterr().err
    assert "traced for cpu (first call)" in err and "new shape" in err and "new dtype" in err
    assert "compiled by numba in" in err and "new module written" in err
    with pytest.raises(braze.BrazeError):
        braze.set_log("everything")
