"""The notebooks in notebooks/ run top to bottom, and are committed without outputs."""

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow  # the notebooks run top to bottom (pytest -m "not slow" leaves them out)

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
KERNEL = "mdsd-test-python"


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    """A kernel spec that starts *this* interpreter (the venv's), whatever ``python`` is on PATH."""
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "mdsd test kernel",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(root))
        patch.setenv("MPLBACKEND", "Agg")
        yield KERNEL


def test_there_are_five_notebooks():
    assert len(NOTEBOOKS) == 5, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: a code cell has outputs; strip them before committing"
            assert cell.execution_count is None, f"{path.name}: a code cell has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_runs_top_to_bottom(path, kernel_name, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, kernel_name=kernel_name, timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    errors = [
        o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert errors == []


def test_the_headless_command_of_the_notebooks_readme_runs(kernel_name, tmp_path):
    """notebooks/README.md's command runs a notebook headless (nbconvert, from the [dev] extra), writing the
    executed copy, with its outputs, into --output-dir and leaving the committed notebook as it was."""
    import re
    import shlex
    import subprocess

    root = NOTEBOOKS[0].parents[1]
    assert re.search(r'^    "nbconvert>=[\d.]+",', (root / "pyproject.toml").read_text(), re.M)
    readme = (root / "notebooks" / "README.md").read_text()
    (line,) = [s.strip() for s in readme.splitlines() if s.startswith("    .venv/bin/jupyter nbconvert")]
    argv = shlex.split(line)
    notebook = Path(argv[argv.index("--execute") + 1])
    argv[argv.index("--output-dir") + 1] = str(tmp_path)
    before = (root / notebook).read_bytes()
    command = [sys.executable, "-m", "jupyter", *argv[1:], f"--ExecutePreprocessor.kernel_name={kernel_name}"]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    executed = nbformat.read(tmp_path / notebook.name, as_version=4)
    assert any(c.outputs for c in executed.cells if c.cell_type == "code")
    assert (root / notebook).read_bytes() == before
