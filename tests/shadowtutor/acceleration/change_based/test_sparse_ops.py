from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shadowtutor.acceleration.change_based.sparse_ops import BilinearUpsample, PaddedMap, SparseConv


@pytest.mark.parametrize(("kernel", "stride", "padding"), [((3, 3), 2, (1, 1)), ((3, 3), 1, (1, 1)),
                                                          ((1, 3), 1, (0, 1)), ((3, 1), 1, (1, 0))])
@pytest.mark.parametrize("dense_fraction", [0.0, 1.0])
def test_sparse_conv_equals_conv2d_at_the_asked_positions(kernel, stride, padding, dense_fraction) -> None:
    torch.manual_seed(0)
    h, w, cin, cout = 11, 14, 5, 7
    x = torch.randn(1, cin, h, w)
    weight, bias = torch.randn(cout, cin, *kernel), torch.randn(cout)
    expected = F.conv2d(x, weight, bias, stride=stride, padding=padding)[0].permute(1, 2, 0).reshape(-1, cout)
    source = PaddedMap(h, w, cin)
    source.write_all(x[0].permute(1, 2, 0).reshape(-1, cin))
    conv = SparseConv(weight, bias, stride, padding=padding, in_size=(h, w), dense_fraction=dense_fraction)
    assert (conv.out_h, conv.out_w) == tuple(F.conv2d(x, weight, stride=stride, padding=padding).shape[2:])
    index = torch.tensor([0, 3, conv.out_positions - 1])
    torch.testing.assert_close(conv.at(source, index), expected[index], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(conv.dense(source), expected, rtol=1e-4, atol=1e-4)


def test_affected_positions_are_the_receptive_field() -> None:
    conv = SparseConv(torch.zeros(1, 1, 3, 3), torch.zeros(1), 2, padding=(1, 1), in_size=(8, 8), dense_fraction=0.5)
    changed = torch.tensor([3 * 8 + 3])  # input (3, 3) is read by outputs (1..2, 1..2) of the 4x4 output
    assert conv.affected(changed).tolist() == [5, 6, 9, 10]


@pytest.mark.parametrize(("size_in", "size_out"), [((12, 20), (23, 40)), ((5, 7), (20, 28)), ((9, 16), (18, 32))])
def test_sparse_upsampling_equals_interpolate(size_in, size_out) -> None:
    torch.manual_seed(1)
    x = torch.randn(1, 3, *size_in)
    expected = F.interpolate(x, size=size_out, mode="bilinear", align_corners=False)[0].permute(1, 2, 0)
    up = BilinearUpsample(size_in, size_out)
    source = x[0].permute(1, 2, 0).reshape(-1, 3)
    everything = torch.arange(size_out[0] * size_out[1])
    torch.testing.assert_close(up.at(source, everything), expected.reshape(-1, 3), rtol=1e-5, atol=1e-5)
    changed = torch.tensor([size_in[1] + 1])
    affected = set(up.affected(changed).tolist())
    bumped = source.clone()
    bumped[changed] += 1
    moved = (up.dense(bumped) - up.dense(source)).abs().amax(1) > 0
    assert set(moved.nonzero().squeeze(1).tolist()) <= affected


@pytest.mark.parametrize(("kernel", "stride", "padding"), [((3, 3), 2, (1, 1)), ((3, 3), 1, (1, 1)),
                                                          ((1, 3), 1, (0, 1)), ((3, 1), 1, (1, 0))])
def test_affected_positions_equal_pooling_the_change_mask(kernel, stride, padding) -> None:
    h, w = 13, 10
    conv = SparseConv(
        torch.zeros(1, 1, *kernel), torch.zeros(1), stride, padding=padding, in_size=(h, w), dense_fraction=0.5
    )
    changed = torch.randperm(h * w, generator=torch.Generator().manual_seed(2))[:9].sort().values
    mask = torch.zeros(h * w)
    mask[changed] = 1
    pooled = F.max_pool2d(mask.view(1, 1, h, w), kernel, stride, padding).flatten()
    assert conv.affected(changed).tolist() == pooled.nonzero().squeeze(1).tolist()
