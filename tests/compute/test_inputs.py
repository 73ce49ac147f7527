"""Inputs: the reference example, random inputs and user files, with one-sentence errors."""

import numpy as np
import pytest

from compute import InputError, load_inputs, random_inputs, seed_example, validate_inputs
from compute.inputs import check_dense_budget


def test_seed_example_is_the_seed_vectors():
    s = seed_example()
    assert s.q.shape == s.k.shape == s.v.shape == (6, 2)
    np.testing.assert_array_equal(s.v[4], [0.5, 3])


def test_random_inputs_are_seeded_and_scaled():
    a, b = random_inputs(10, 4, 3, n_k=7, seed=5), random_inputs(10, 4, 3, n_k=7, seed=5)
    np.testing.assert_array_equal(a.q, b.q)
    assert a.k.shape == (7, 4) and a.v.shape == (7, 3)
    big = random_inputs(10, 4, 3, n_k=7, seed=5, scale=100)
    np.testing.assert_allclose(big.q, a.q * 100)


@pytest.mark.parametrize("n", [1, 2, 7, 300])
def test_random_inputs_depend_on_the_seed_alone(monkeypatch, n):
    """Drawn on one core or two, the same seed gives the same bits; the halves of an
    array come from separate streams (no repeated normals), and other seeds differ."""
    import compute.inputs as ci

    monkeypatch.setattr(ci, "PARALLEL_DRAW", 0)  # both cores, even for small arrays
    two = random_inputs(n, 64, 32, n_k=n + 3, seed=11)
    monkeypatch.setattr(ci, "CHUNK_THREADS", 1)
    one = random_inputs(n, 64, 32, n_k=n + 3, seed=11)
    for a, b in zip((two.q, two.k, two.v), (one.q, one.k, one.v), strict=True):
        np.testing.assert_array_equal(a, b)
    values = np.concatenate([two.q.ravel(), two.k.ravel(), two.v.ravel()])
    assert len(np.unique(values)) == values.size
    assert not np.array_equal(random_inputs(n, 64, 32, n_k=n + 3, seed=12).q, two.q)
    if n == 300:  # standard normal
        assert abs(values.mean()) < 0.02 and abs(values.std() - 1) < 0.02


@pytest.mark.parametrize(
    ("q", "k", "v", "message"),
    [
        (np.ones(3), np.ones((3, 2)), np.ones((3, 2)), "Q has 1 dimension"),
        (np.ones((3, 2)), np.ones((3, 3)), np.ones((3, 2)), "same head size d"),
        (np.ones((3, 2)), np.ones((3, 2)), np.ones((4, 2)), "exactly one value row"),
        (np.full((3, 2), np.nan), np.ones((3, 2)), np.ones((3, 2)), "NaN or infinite"),
        (np.array([["a", "b"]]), np.ones((1, 2)), np.ones((1, 2)), "real numbers"),
        (np.ones((0, 2)), np.ones((1, 2)), np.ones((1, 2)), "is empty"),
    ],
)
def test_validation_messages(q, k, v, message):
    with pytest.raises(InputError, match=message) as info:
        validate_inputs(q, k, v)
    text = str(info.value)
    assert text.endswith(".") and "\n" not in text


def test_dense_budget():
    check_dense_budget(1024, 1024)
    with pytest.raises(InputError, match="memory budget; lower N or N_keys"):
        check_dense_budget(100_000, 100_000)


def test_load_npz_and_npy(tmp_path):
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((3, 5, 4))
    np.savez(tmp_path / "qkv.npz", Q=q, K=k, V=v)
    got = load_inputs(tmp_path / "qkv.npz")
    np.testing.assert_array_equal(got.k, k)
    assert got.source == "qkv.npz"
    np.save(tmp_path / "qkv.npy", np.stack([q, k, v]))
    np.testing.assert_array_equal(load_inputs(tmp_path / "qkv.npy").v, v)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.npy", b"not numpy at all", "could not be read"),
        ("bad.npz", b"PK garbage", "could not be read"),
        ("bad.txt", b"1 2 3", "not a .npy or .npz"),
        ("missing.npy", None, "does not exist"),
    ],
)
def test_bad_files(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        load_inputs(path)


def test_wrong_npy_shape_and_missing_arrays(tmp_path):
    np.save(tmp_path / "flat.npy", np.ones((4, 4)))
    with pytest.raises(InputError, match=r"stack Q, K, V as \(3, N, d\)"):
        load_inputs(tmp_path / "flat.npy")
    np.savez(tmp_path / "qk.npz", q=np.ones((2, 2)), k=np.ones((2, 2)))
    with pytest.raises(InputError, match="lacks array"):
        load_inputs(tmp_path / "qk.npz")
