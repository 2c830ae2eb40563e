"""gpuplan: choose the order and placement of GPU jobs; audit, predict, simulate and run them."""

from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec

__all__ = ["ClusterSpec", "GpuSpec", "Job", "NodeSpec", "__version__"]
__version__ = "0.1.0"
