import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def data_dir():
    d = os.environ.get("PTXFLOW_DATA_DIR")
    return pathlib.Path(d) if d else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def velodyne():
    d = data_dir() / "pointclouds"
    t, s = d / "251370668.pcd", d / "251371071.pcd"
    if not (t.exists() and s.exists()):
        pytest.skip(f"Velodyne pair not found under {d} (set PTXFLOW_DATA_DIR)")
    return t, s


@pytest.fixture(scope="session")
def cli():
    """The command-line tool: $PTXFLOW_CLI, target/release/ptxflow, or `cargo run --release`."""
    exe = os.environ.get("PTXFLOW_CLI")
    if exe:
        return [exe]
    for base in (os.environ.get("CARGO_TARGET_DIR"), REPO / "target"):
        if base and (pathlib.Path(base) / "release" / "ptxflow").exists():
            return [str(pathlib.Path(base) / "release" / "ptxflow")]
    if shutil.which("cargo"):
        return ["cargo", "run", "--quiet", "--release", "--manifest-path", str(REPO / "Cargo.toml"), "--"]
    pytest.skip("no ptxflow command-line tool (set PTXFLOW_CLI)")


def run_cli(cli, *args):
    return subprocess.run(cli + list(args), check=True, capture_output=True, text=True).stdout
