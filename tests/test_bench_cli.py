"""``braze bench`` at tiny sizes: the table, JSON, markdown and PNG it writes,
and peers that are not installed."""
import json

from braze import cli
from braze import workloads as W


def test_bench_tiny_writes_table_json_markdown_and_png(tmp_path, capsys, monkeypatch):
    real = W.available_peers
    monkeypatch.setattr(W, "available_peers",
                        lambda: dict(real(), jax="not installed (ImportError)", torch="not installed (ImportError)"))
    paths = {k: tmp_path / f"bench.{k}" for k in ("json", "md", "png")}
    code = cli.main(["bench", "--tiny", "--peers", "numexpr,jax,torch", "--json", str(paths["json"]),
                     "--markdown", str(paths["md"]), "--plot", str(paths["png"])])
    out = capsys.readouterr().out
    assert code == 0
    for name in (w.name for w in W.WORKLOADS.values()):
        assert f"== {name} ==" in out
    assert "STREAM triad" in out and "braze[cpu]" in out and "% triad" in out
    braze_lines = [line for line in out.splitlines() if "braze[cpu]" in line]
    assert all(line.rstrip().endswith(("compiled", "disk cache", "in memory")) for line in braze_lines)
    assert "skipped: not installed (ImportError)" in out
    data = json.loads(paths["json"].read_text())
    rows = [r for r in data["results"] if r["impl"] == "braze[cpu]"]
    assert len(rows) == 2 * len(W.WORKLOADS) and all(r["median_s"] > 0 and r["speedup"] > 0 for r in rows)
    assert data["peers"]["torch"].startswith("not installed")
    assert "| row softmax | 64x128 | float32 | braze[cpu] |" in paths["md"].read_text()
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths["png"].stat().st_size > 10000
