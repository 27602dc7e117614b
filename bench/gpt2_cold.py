"""The GPT-2 forward of the corpus compiled cold in this process (run by
bench/test_programs.py in a fresh one, with an empty BRAZE_CACHE_DIR):
prints the first call's seconds and those until it runs compiled, as JSON.

``python bench/gpt2_cold.py N_LAYER``"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import numpy as np  # noqa: E402

import braze  # noqa: E402
from braze.targets import cpu_cache  # noqa: E402
from programs import gpt2  # noqa: E402


def main(n_layer: int) -> dict:
    p = gpt2.params(n_layer=n_layer, n_embd=256, n_ctx=128)
    args = (np.arange(128) % 97, p["wte"], p["wpe"], p["blocks"], p["ln_f"])
    fn = braze.compile(gpt2.gpt2, target="cpu", static_argnames=("n_head",))
    t0 = time.perf_counter()
    fn(*args, n_head=p["n_head"])
    first = time.perf_counter() - t0
    cpu_cache.wait_background()
    compiled = time.perf_counter() - t0
    lowered = fn.lower(*args, n_head=p["n_head"])
    return {"first call s": round(first, 3), "compiled after s": round(compiled, 3),
            **{f"{k} s": round(v, 4) for k, v in lowered.times.items()}, **lowered.counts}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]))))
