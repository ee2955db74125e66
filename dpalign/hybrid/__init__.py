"""Work queues over many workers: CPU cores + OpenCL devices (``hybrid``), and Dask (``dask``)."""

from .backend import HybridBackend
from .cluster import DaskBackend

__all__ = ["DaskBackend", "HybridBackend"]
