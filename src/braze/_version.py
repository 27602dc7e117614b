"""braze's version (its own module: the kernel cache keys on it without importing the package)."""
__version__ = "0.1.0"
