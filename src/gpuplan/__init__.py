"""gpuplan: choose the order and placement of GPU jobs; audit, predict, simulate and run them."""

from gpuplan.compiled import install_source_finder

install_source_finder()  # the core's source instead of a stale or unwanted compiled build (compiled.py)

from gpuplan.model import ClusterSpec, GpuSpec, Job, NodeSpec  # noqa: E402

__all__ = ["ClusterSpec", "GpuSpec", "Job", "NodeSpec", "__version__"]
__version__ = "0.1.0"
