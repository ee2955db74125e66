"""The OpenCL host layer: device choice, program building and caching, readable errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import golden_cases, opencl_devices

from dpalign.cli import main
from dpalign.errors import BackendUnavailable
from dpalign.kernels_cl import programs
from dpalign.kernels_cl.context import (
    OpenCLError,
    choose_device,
    device_context,
    driver_errors,
    list_devices,
)

pytestmark = pytest.mark.skipif(not opencl_devices(), reason="no OpenCL device")


def test_default_device_prefers_a_gpu(monkeypatch):
    monkeypatch.setattr("dpalign.config.OPENCL_DEVICE", None)
    ident, device = choose_device()
    kinds = dict(opencl_devices())
    assert kinds[ident] == ("gpu" if "gpu" in kinds.values() else "cpu")


def test_device_specs_by_id_kind_and_name(monkeypatch):
    monkeypatch.setattr("dpalign.config.OPENCL_DEVICE", None)
    ident, device = list_devices()[0]
    assert choose_device(ident)[0] == ident
    fragment = device.name.strip().split()[0].lower()
    assert fragment in choose_device(fragment)[1].name.lower()
    kind = dict(opencl_devices())[ident]
    assert dict(opencl_devices())[choose_device(kind)[0]] == kind


def test_environment_variable_chooses_the_device(monkeypatch):
    monkeypatch.setattr("dpalign.config.OPENCL_DEVICE", "no such device")
    with pytest.raises(BackendUnavailable, match="no OpenCL device matches 'no such device'.*0:0"):
        choose_device()


def test_context_is_memoised():
    assert device_context("0:0") is device_context("0:0")


def test_programs_are_memoised_and_cached_on_disk(monkeypatch, tmp_path):
    monkeypatch.setattr("dpalign.config.OPENCL_CACHE_DIR", str(tmp_path))
    dctx = device_context()
    defines = {"S": 4, "PACKED": 0, "PROBE": 1}  # a setting no other test builds
    _, first = programs.build(dctx, "papara.cl", defines)
    _, again = programs.build(dctx, "papara.cl", defines)
    assert (first.origin, again.origin) == ("compiled", "memory")
    assert len(list(tmp_path.glob("papara-*.bin"))) == 1
    dctx.programs.clear()
    _, from_disk = programs.build(dctx, "papara.cl", defines)
    assert from_disk.origin == "disk"


def test_disk_cache_can_be_turned_off(monkeypatch, tmp_path):
    monkeypatch.setattr("dpalign.config.OPENCL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("dpalign.config.OPENCL_CACHE", False)
    programs.build(device_context(), "papara.cl", {"S": 4, "PROBE": 2})
    assert not list(tmp_path.iterdir())


def test_compile_failure_names_options_log_and_saved_source(monkeypatch, tmp_path):
    monkeypatch.setattr("dpalign.config.OPENCL_CACHE_DIR", str(tmp_path))
    with pytest.raises(programs.KernelBuildError) as info:
        programs.build(device_context(), "papara.cl", {"S": "(", "PROBE": 3})
    message = str(info.value)
    assert "-DS=(" in message and "papara.cl" in message
    saved = next(tmp_path.glob("failed-papara-*.cl"))
    assert saved.read_text().startswith("#define PROBE 3\n#define S (\n")
    assert str(saved) in message


def test_driver_errors_become_readable():
    import pyopencl as cl

    dctx = device_context()
    expected = re.escape(f"OpenCL error on {dctx.caps.name} while copying: INVALID_VALUE")
    with pytest.raises(OpenCLError, match=expected):
        with driver_errors(dctx.caps, "copying"):
            buffer = cl.Buffer(dctx.context, cl.mem_flags.READ_WRITE, 16)
            cl.enqueue_copy(dctx.queue, np.zeros(4, np.int32), buffer, src_offset=64)


def test_capabilities_are_sane():
    caps = device_context().caps
    assert caps.global_mem >= caps.max_alloc > 0 and caps.local_mem > 0
    assert caps.max_work_group >= 32 and caps.kind in ("gpu", "cpu", "accelerator")
    assert caps.name in caps.describe()


def test_devices_command_marks_the_chosen_device(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "[--backend opencl uses this one]" in out and "opencl" in out


def _tiny_args():
    # A DNA case by name: which case sorts first depends on where the cases come from
    # (protein_small does in the copy under tests/, which CI reads).
    case = next(c for c in golden_cases() if c.name == "tiny_01")
    return [
        "papara",
        "--ref",
        str(case / "tree.nwk"),
        "--msa",
        str(case / "ref.phy"),
        "--reads",
        str(case / "queries.fa"),
    ]


def test_cli_device_errors_are_clear(capsys):
    assert main([*_tiny_args(), "--backend", "opencl", "--device", "nonesuch"]) == 1
    assert "no OpenCL device matches 'nonesuch'" in capsys.readouterr().err
    assert main([*_tiny_args(), "--backend", "reference", "--device", "0:0"]) == 1
    assert "--device applies to --backend opencl or hybrid" in capsys.readouterr().err


def test_sources_expand_the_shared_packed_arithmetic():
    """papara.cl, search.cl and search_group.cl read s16x2.cl through an #include that the
    package expands itself, so the cache key (the rendered text) covers the shared file."""
    from dpalign.kernels_cl.programs import source

    shared = source("s16x2.cl")
    for name in ("papara.cl", "search.cl", "search_group.cl"):
        text = source(name)
        assert '#include "' not in text and shared in text


def test_tile_kernels_share_tiles_cl_and_their_cache_keys_follow_it(monkeypatch, tmp_path):
    """antidiagonal.cl and antidiagonal16.cl take their parameter layout and tile position
    from tiles.cl: an edit of that file alone must give both programs new disk-cache keys."""
    from importlib import resources

    from dpalign.kernels_cl.programs import _digest, render_options, source

    names = ("antidiagonal.cl", "antidiagonal16.cl")
    shared = source("tiles.cl")
    assert "TILE_POSITION()" in shared
    for name in names:
        text = source(name)
        assert '#include "' not in text and shared in text

    options = render_options({"BANDS": 1})
    before = {name: _digest("device", source(name), options) for name in names}
    package = resources.files(programs.__package__)
    for item in package.iterdir():
        if item.name.endswith(".cl"):
            (tmp_path / item.name).write_text(item.read_text(encoding="utf-8"), "utf-8")
    edited = tmp_path / "tiles.cl"
    edited.write_text(shared.replace("#define P_NTR 16", "#define P_NTR 17"), "utf-8")
    monkeypatch.setattr(programs.resources, "files", lambda package: tmp_path)
    for name in names:
        assert _digest("device", source(name), options) != before[name]
