"""A 'downstream package': registers a kernel by name, without importing the composite."""
import braze

CALLS = []


@braze.register_kernel("braze.test.downstream_scale", "cpu", priority=5)
def scale_cpu(x, *, factor):
    CALLS.append(x.shape)
    return x * factor
