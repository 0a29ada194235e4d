"""cuda-convnet v1's ``randSparse`` conv and local layers (layers/weights.py,
layers/connectivity.py, kernels/conv/sparse_channels.py).

Checked: the table is drawn as v1 drew it (whole permutations of the channels, so each
group reads distinct channels and each channel is read by groups*fc/channels groups)
from the run's seed and the layer's name; the layer computes exactly a dense
convolution whose filters are zero outside the channels their group reads; the
scatter-add is the adjoint of the gather; and finite-difference gradient checks of
conv (every CPU layout) and local layers.
"""

from __future__ import annotations

import numpy as np
import pytest

import convnet.kernels.conv.choice as conv_choice
from convnet.kernels.conv.sparse_channels import gather_channels, scatter_channels
from convnet.layers import build_layer
from convnet.layers.base import Context
from convnet.layers.connectivity import connection_tables, draw_table, layer_rng, table_error
from tests.support.layers import conv_def, fd_check, params_for, random_inputs

#: (channels, groups, filterChannels): 1, 2 and 4 permutations of the channels
CASES = {"disjoint": ((4, 2, 2), 4), "twice": ((4, 4, 2), 8), "all_shuffled": ((4, 4, 4), 4)}


def _sparse_def(case, type_="conv", **kw):
    (channels, groups, fc), filters = CASES[case]
    return conv_def(in_shapes=((channels, 5, 5),), filters=filters, groups=groups,
                    rand_sparse=True, filter_channels=fc, type_=type_, **kw)


@pytest.mark.parametrize("channels, groups, fc", [v[0] for v in CASES.values()] + [(64, 8, 16)])
def test_the_table_is_whole_permutations_of_the_channels(channels, groups, fc):
    table = draw_table(np.random.default_rng(1), groups, channels, fc).astype(int)
    assert table.shape == (groups * fc,)
    for g in range(groups):
        assert len(set(table[g * fc:(g + 1) * fc])) == fc  # a group reads distinct channels
    counts = np.bincount(table, minlength=channels)
    assert (counts == groups * fc // channels).all()  # every channel as often
    assert table_error(table, channels, fc) is None


def test_a_table_that_is_not_permutations_is_refused():
    assert "not made of permutations" in table_error(np.array([0, 0, 1, 2.0]), 4, 2)
    assert "not channel indices" in table_error(np.array([0, 1.5, 2, 3]), 4, 2)
    assert "entries" in table_error(np.arange(6.0), 4, 2)


def test_the_table_comes_from_the_seed_and_the_layer_name():
    ldef = conv_def(in_shapes=((64, 5, 5),), filters=16, groups=8, rand_sparse=True,
                    filter_channels=16, name="conv2")
    first = connection_tables(ldef, seed=5)[0]
    assert np.array_equal(first, connection_tables(ldef, seed=5)[0])
    assert not np.array_equal(first, connection_tables(ldef, seed=6)[0])
    other = conv_def(in_shapes=((64, 5, 5),), filters=16, groups=8, rand_sparse=True,
                     filter_channels=16, name="conv3")
    assert not np.array_equal(first, connection_tables(other, seed=5)[0])
    # the layer's own draw (what the weight store holds) is the same table
    params = build_layer(ldef).init_params(layer_rng(5, "conv2"))
    assert np.array_equal(params["C0"].astype(int), first)


def test_the_tables_leave_the_initial_weights_as_they_were():
    sparse, dense = _sparse_def("disjoint"), conv_def(in_shapes=((4, 5, 5),), filters=4, groups=2)
    a = build_layer(sparse).init_params(layer_rng(3, "conv"))
    b = build_layer(dense).init_params(layer_rng(3, "conv"))
    assert np.array_equal(a["W0"], b["W0"]) and set(a) == {"W0", "b", "C0"}


@pytest.mark.parametrize("type_", ["conv", "local"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_layer_is_a_dense_layer_with_zeros_outside_each_groups_channels(case, type_):
    (channels, groups, fc), filters = CASES[case]
    sparse = _sparse_def(case, type_=type_)
    dense = conv_def(in_shapes=((channels, 5, 5),), filters=filters, type_=type_)
    params = params_for(build_layer(sparse), seed=4)
    table = params["C0"].astype(int)
    w = params["W0"]  # (F, fc, fs, fs) or (P, F, fc, fs, fs)
    dense_w = np.zeros(w.shape[:-3] + (channels,) + w.shape[-2:])
    per_group = filters // groups
    for f in range(filters):
        g = f // per_group
        for j in range(fc):
            dense_w[..., f, table[g * fc + j], :, :] += w[..., f, j, :, :]
    x = random_inputs(sparse, batch=3, rng=np.random.default_rng(2))
    ctx = Context(train=False)
    got = build_layer(sparse).forward(x, params, ctx)[0]
    want = build_layer(dense).forward(x, {"W0": dense_w, "b": params["b"]}, ctx)[0]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_scatter_add_is_the_adjoint_of_the_gather(case):
    (channels, groups, fc), _ = CASES[case]
    rng = np.random.default_rng(0)
    table = draw_table(rng, groups, channels, fc)
    x = rng.standard_normal((2, channels, 3, 3))
    g = rng.standard_normal((2, groups * fc, 3, 3))
    back = scatter_channels(g, table, channels, x.shape)
    expected = np.zeros_like(x)
    np.add.at(expected, (slice(None), table.astype(int)), g)
    np.testing.assert_allclose(back, expected, rtol=1e-12)
    gathered = gather_channels(x, table, channels).reshape(g.shape)
    assert np.isclose(np.sum(gathered * g), np.sum(x * back))


@pytest.mark.parametrize("layout", ["nchw", "chwn", "cases", "winograd"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_gradients(case, layout, monkeypatch):
    monkeypatch.setattr(conv_choice, "LAYOUT", layout)
    ldef = _sparse_def(case, neuron_="tanh[1,1]")
    fd_check(ldef, random_inputs(ldef, batch=2))


@pytest.mark.parametrize("case", sorted(CASES))
def test_local_gradients(case):
    ldef = _sparse_def(case, type_="local")
    fd_check(ldef, random_inputs(ldef, batch=2))


def test_a_sparse_input_beside_a_dense_one():
    ldef = conv_def(in_shapes=((4, 5, 5), (2, 5, 5)), filters=4, groups=[4, 1],
                    rand_sparse=[True, False], filter_channels=[2, 2])
    fd_check(ldef, random_inputs(ldef, batch=2))
