"""Generated kernel modules are exactly what their generator writes (regenerate, then commit)."""

from pathlib import Path

import pytest

from dpalign.simd import _generate


@pytest.mark.parametrize("name", sorted(_generate.GENERATED))
def test_committed_output_is_what_the_generator_writes(name):
    committed = (Path(_generate.__file__).parent / name).read_text()
    assert committed == _generate.GENERATED[name](), (
        f"dpalign/simd/{name} differs from its generator: run python -m dpalign.simd._generate"
    )


def test_each_strip_height_loads_and_stores_every_row():
    for rows in _generate.PAPARA_STRIPS:
        source = _generate.papara_strip(rows)
        assert source.count("_cell(") == rows
        assert source.count("vload32(bh,") == source.count("vstore32(bh,") == rows
        assert source.count("vload32(be,") == source.count("vstore32(be,") == rows


@pytest.mark.parametrize("kind", ["local", "global", "ends"])
def test_each_pairwise_strip_computes_every_column(kind):
    source = _generate.pairwise_strip(kind)
    columns = _generate.PAIRWISE_STRIP
    assert source.count("_cell(dg, vload(prof,") == columns
    assert source.count("vstore(hbuf,") == (columns if kind == "ends" else 0)
