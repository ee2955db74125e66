"""Numba CPU kernels, one module per kernel shape. Pure compute on arrays: no I/O here."""
