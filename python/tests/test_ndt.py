"""ptxflow.read_cloud and ptxflow.ndt on the Velodyne pair against the command line's pose."""
import json

import numpy as np
import pytest

import ptxflow
from conftest import run_cli


@pytest.fixture(scope="module")
def clouds(velodyne):
    t, s = velodyne
    return ptxflow.read_cloud(t), ptxflow.read_cloud(str(s))


@pytest.fixture(scope="module")
def cli_pose(cli, velodyne):
    t, s = velodyne
    out = run_cli(cli, "ndt", "--json", "--device", "cpu", "--target", str(t), "--source", str(s))
    return json.loads(out)


def test_read_cloud(clouds):
    t, s = clouds
    for c in (t, s):
        assert c.dtype == np.float32 and c.ndim == 2 and c.shape[1] == 3 and len(c) > 1000
        assert np.isfinite(c).all()


def test_align_matches_command_line(clouds, cli_pose):
    t, s = clouds
    r = ptxflow.ndt.align(t, s, device="cpu")
    assert r["device"] == "cpu"
    assert r["transform"].shape == (4, 4) and r["transform"].dtype == np.float64
    assert r["stop"] == cli_pose["stop"] and r["converged"] == cli_pose["converged"]
    assert r["iterations"] == cli_pose["iterations"]
    np.testing.assert_allclose(r["transform"], np.array(cli_pose["t_target_source"]), atol=1e-9)
    assert abs(r["score"] - cli_pose["score"]) <= 1e-9 * abs(cli_pose["score"])
    # float64 clouds give the same answer (converted to float32)
    r64 = ptxflow.ndt.align(t.astype(np.float64), s.astype(np.float64), device="cpu")
    np.testing.assert_array_equal(r64["transform"], r["transform"])


def test_align_hypotheses_best_matches(clouds, cli_pose):
    t, s = clouds
    shifted = np.eye(4)
    shifted[:3, 3] = [0.3, -0.2, 0.0]
    c, sn = np.cos(0.03), np.sin(0.03)
    yawed = np.eye(4)
    yawed[:2, :2] = [[c, -sn], [sn, c]]
    inits = np.stack([np.eye(4), shifted, yawed])
    out = ptxflow.ndt.align_hypotheses(t, s, inits, device="cpu")
    assert len(out["results"]) == 3 and 0 <= out["best"] < 3
    best = out["results"][out["best"]]
    assert best["converged"]
    np.testing.assert_allclose(best["transform"], np.array(cli_pose["t_target_source"]), atol=5e-3)
    # the identity hypothesis is the plain alignment
    single = ptxflow.ndt.align(t, s, device="cpu")
    np.testing.assert_allclose(out["results"][0]["transform"], single["transform"], atol=1e-12)


def test_init_is_used(clouds, cli, velodyne):
    t, s = clouds
    init = np.eye(4)
    init[:3, 3] = [0.5, 0.0, 0.0]
    r = ptxflow.ndt.align(t, s, init=init, device="cpu", max_iters=3)
    cli_out = json.loads(run_cli(cli, "ndt", "--json", "--device", "cpu", "--max-iters", "3",
                                 "--init", "0.5 0 0 0 0 0", "--target", str(velodyne[0]),
                                 "--source", str(velodyne[1])))
    np.testing.assert_allclose(r["transform"], np.array(cli_out["t_target_source"]), atol=1e-9)


def test_bad_inputs(clouds, tmp_path):
    t, s = clouds
    with pytest.raises(FileNotFoundError):
        ptxflow.read_cloud(tmp_path / "missing.pcd")
    (tmp_path / "junk.pcd").write_bytes(b"not a point cloud")
    with pytest.raises(ValueError):
        ptxflow.read_cloud(tmp_path / "junk.pcd")
    with pytest.raises(TypeError):
        ptxflow.ndt.align(t.tolist(), s)
    with pytest.raises(ValueError, match="shape"):
        ptxflow.ndt.align(t[:, :2].copy(), s)
    with pytest.raises(ValueError, match="not rigid"):
        ptxflow.ndt.align(t, s, init=2 * np.eye(4), device="cpu")
    with pytest.raises(ValueError, match="4x4|shape"):
        ptxflow.ndt.align(t, s, init=np.eye(3))
    with pytest.raises(ValueError):
        ptxflow.ndt.align(t, s, search="nearest")
    with pytest.raises(ValueError):
        ptxflow.ndt.align(t, s, resolution=-1.0)
    with pytest.raises(ValueError, match="no \\(finite\\) points"):
        ptxflow.ndt.align(t, np.zeros((0, 3), np.float32), device="cpu")
    with pytest.raises(ValueError, match="shape"):
        ptxflow.ndt.align_hypotheses(t, s, np.eye(4))
