"""Hand-written ``cpu`` kernels for the ``braze.nn`` composites: none, on evidence.

A kernel is registered here only where it beats the fused body by at least
1.2x in ``bench/test_library.py`` (same run, this machine). None does, so
none is registered:

* softmax, log_softmax, logsumexp, layer_norm, rms_norm: the body fuses into
  one row kernel with one pass per reduction stage over each row while it
  is in cache (softmax stores exp(x - max) in its output instead of
  recomputing it); a single-pass online softmax or a Welford layer norm
  trades cheap in-cache passes for more arithmetic per element.
* gelu, sigmoid, silu: one elementwise loop over the vectorized exp/tanh.
* attention: two BLAS matmuls around a fused softmax row kernel.
* softmax_cross_entropy: a hand-written one-pass numba kernel (row max,
  sum of exponentials, the label's logit, the mean) measured 9.49 ms
  against 3.16 ms for the fused body at 8192x1024 float32, and 13.7 ms
  against 11.2 ms at float64, so it was removed. The generated row
  kernel vectorizes its max (integer order keys) and its float32 sum
  (float32 blocks), which the straightforward hand-written loop does not.

The module stays as the place for such kernels; ``CPUTarget`` imports it so
they register before the first selection.
"""
