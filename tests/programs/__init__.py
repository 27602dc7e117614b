"""A corpus of NumPy programs written the way their authors write them (not
the way braze likes them), compiled unchanged by the test suite."""
