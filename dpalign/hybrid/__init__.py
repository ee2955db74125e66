"""The hybrid CPU+GPU work queue and the Dask backend (not yet written)."""
