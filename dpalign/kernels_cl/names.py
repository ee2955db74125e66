"""The OpenCL backend's kernel table names, apart from the host modules that run them.

The engine's registry imports the backend class on every command (``dpalign align`` of two
short sequences included); with the names here, that import costs no host module (~30 ms of
a ~0.2 s command on a 2-core machine).
"""

from __future__ import annotations

#: PaPaRa's kernel designs (``papara.cl``): one profile a work-item, or blocks of them.
PAPARA_DESIGNS = ("strip", "blocked")
#: PaPaRa's table names: ``papara_score_opencl_<design>_i<width>`` -> (design, width).
PAPARA = {
    f"papara_score_opencl_{design}_i{width}": (design, width)
    for design in PAPARA_DESIGNS
    for width in (16, 32)
}
#: Search: ``<family>_score_opencl_search_i<width>`` -> (family, width).
SEARCH = {
    f"{family}_score_opencl_search_i{width}": (family, width)
    for family in ("sw", "nw")
    for width in (16, 32)
}
#: Long pairs' anti-diagonal tiles: ``<family>_fill_opencl_antidiagonal_i32`` -> family.
ANTIDIAGONAL = {f"{family}_fill_opencl_antidiagonal_i32": family for family in ("nw", "sw")}
