"""Each command loads only what it needs: checked in a fresh interpreter per command.

Heavy optional packages cost seconds at every start (scikit-bio ~1 s with scipy.stats and
pandas; torch and jax 8-10 s on hosts that have them, pulled in by scikit-bio's array-backend
probe). A fake ``torch`` and ``jax`` on the path record any import attempt, so the test fails
here, where neither is installed, exactly as the command would slow down where they are.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpalign.hybrid.backend import no_gpu_device_nodes

GOLDEN = Path("/work/shared/golden/papara")
_TINY = GOLDEN / "tiny_01"

# Never needed by any command.
ALWAYS_OUT = ("torch", "jax", "matplotlib", "dask", "scipy.stats", "pandas", "skbio")
# Not needed where no kernel runs (numba alone takes about half a second to import).
NO_KERNEL_OUT = ("numba", "llvmlite", "pyopencl", "scipy")

_FAKE = """\
import os
with open(os.environ["DPALIGN_FAKE_LOG"], "a") as log:
    log.write(__name__ + "\\n")
raise ImportError("fake {name}: recorded")
"""

_PROBE = """\
import json, sys
from dpalign.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.__stderr__)
"""


@pytest.fixture(scope="module")
def fake_path(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fake")
    for name in ("torch", "jax"):
        (root / name).mkdir()
        (root / name / "__init__.py").write_text(_FAKE.replace("{name}", name))
    return root


def _run(fake_path: Path, tmp_path: Path, argv: list[str]) -> tuple[set[str], str]:
    import os

    log = tmp_path / "fake.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(fake_path), str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
    )
    env["DPALIGN_FAKE_LOG"] = str(log)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    modules = set(json.loads(done.stderr.strip().splitlines()[-1]))
    return modules, log.read_text() if log.exists() else ""


def _fasta(tmp_path: Path) -> tuple[str, str]:
    a, b = tmp_path / "a.fa", tmp_path / "b.fa"
    a.write_text(">a\nACGTACGT\n")
    b.write_text(">b\nACGAACGT\n")
    return str(a), str(b)


def _commands(tmp_path: Path) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    a, b = _fasta(tmp_path)
    papara = ["papara", "--ref", str(_TINY / "tree.nwk"), "--msa", str(_TINY / "ref.phy")]
    papara += ["--reads", str(_TINY / "queries.fa"), "--out", "out.phy", "--backend", "numba"]
    auto = [*papara[:-2], "--out", "auto.phy"]
    return {
        "papara auto": (auto, ("pyopencl",) if no_gpu_device_nodes() else ()),
        "help": (["--help"], NO_KERNEL_OUT),
        "papara --help": (["papara", "--help"], NO_KERNEL_OUT),
        "devices": (["devices"], ("numba",)),
        "align": (["align", a, b], NO_KERNEL_OUT),
        "search": (["search", "--query", a, "--db", b, "--backend", "numba"], ()),
        "papara": (papara, ()),
    }


def _reader_imports_skbio() -> bool:
    code = (
        "import sys, tempfile; from dpalign.io import read_fasta\n"
        "with tempfile.NamedTemporaryFile('w', suffix='.fa') as f:\n"
        "    f.write('>a\\nACGT\\n'); f.flush(); read_fasta(f.name)\n"
        "print('skbio' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return done.stdout.strip() != "False"


# The FASTA reader is scikit-bio's until the reader of issue 14 (helper "cli") lands; the
# commands that read FASTA are expected to fail this test until then, and only then.
_READS_FASTA = pytest.mark.xfail(
    _reader_imports_skbio(), reason="dpalign.io.read_fasta imports scikit-bio", strict=True
)


@pytest.mark.parametrize(
    "name",
    [
        "help",
        "papara --help",
        "devices",
        pytest.param("align", marks=_READS_FASTA),
        pytest.param("search", marks=_READS_FASTA),
        pytest.param("papara", marks=_READS_FASTA),
        pytest.param("papara auto", marks=_READS_FASTA),
    ],
)
def test_command_imports_only_what_it_needs(fake_path, tmp_path, name):
    argv, also_out = _commands(tmp_path)[name]
    modules, faked = _run(fake_path, tmp_path, argv)
    assert not faked, f"dpalign {name} tried to import {faked.split()}"
    loaded = sorted(m for m in (*ALWAYS_OUT, *also_out) if m in modules)
    assert not loaded, f"dpalign {name} imported {loaded}"


def test_import_dpalign_is_light(fake_path, tmp_path):
    modules, faked = _run(fake_path, tmp_path, ["--version"])
    assert not faked
    assert not [m for m in (*ALWAYS_OUT, *NO_KERNEL_OUT) if m in modules]


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_the_command_ends_at_once_with_its_outputs_whole(tmp_path, backend):
    """``python -m dpalign.cli papara`` leaves by ``os._exit`` after flushing: standard output,
    the alignment file and the placements are complete, and the exit code is 0."""
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path.cwd()), env.get("PYTHONPATH")]))
    args = ["--ref", str(_TINY / "tree.nwk"), "--msa", str(_TINY / "ref.phy")]
    args += ["--reads", str(_TINY / "queries.fa"), "--backend", backend]
    want = (_TINY / "default.phy").read_text()
    run = [sys.executable, "-m", "dpalign.cli", "papara", *args]
    done = subprocess.run([*run, "--out", "-"], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout == want
    assert "dpalign papara:" in done.stderr
    out, placements = tmp_path / "o.phy", tmp_path / "p.tsv"
    done = subprocess.run(
        [*run, "--out", str(out), "--placements", str(placements)], capture_output=True, env=env
    )
    assert done.returncode == 0 and out.read_text() == want
    assert len(placements.read_text().splitlines()) == 1 + 3  # a header and the three reads
    done = subprocess.run(
        [*run, "--out", str(tmp_path / "missing" / "o.phy")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "error" in done.stderr
