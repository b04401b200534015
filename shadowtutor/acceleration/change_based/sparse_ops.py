"""The building blocks of change-based execution (CBinfer, section 3) on the CPU.

Feature maps are stored channels-last as flat ``(H * W, C)`` tensors; inputs of spatial
convolutions are stored with a one-pixel zero border (:class:`PaddedMap`), so that gathering
a receptive field is one ``index_select`` of precomputed offsets, with no bounds checks.
A sparse update of a map is a :class:`Change`: the flat indices (unpadded, row-major) of the
positions that were recomputed and their new values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

# 512 kB of gathered patches per matrix multiplication
PATCH_CHUNK_FLOATS = 1 << 17


@dataclass
class Change:
    """New values ``values (n, C)`` at flat positions ``index (n,)`` of an ``(H, W)`` map."""

    index: torch.Tensor
    values: torch.Tensor


def flat_nonzero(mask: torch.Tensor) -> torch.Tensor:
    """Flat indices of the true (non-zero) entries of ``mask``, ascending."""
    return torch.flatten(mask).nonzero().squeeze(1)


def pooled_positions(
    index: torch.Tensor,
    size: tuple[int, int],
    kernel: int | tuple[int, int],
    stride: int,
    padding: int | tuple[int, int],
) -> torch.Tensor:
    """Flat positions of the window grid (``kernel``, ``stride``, ``padding`` over a ``size`` map)
    whose window holds any position in ``index``, ascending (found by max-pooling the positions'
    mask)."""
    mask = torch.zeros(size[0] * size[1])
    mask[index] = 1.0
    return flat_nonzero(F.max_pool2d(mask.view(1, 1, *size), kernel, stride, padding))


class PaddedMap:
    """A ``(H, W, C)`` map with a zero border of one pixel, stored as ``(H + 2) * (W + 2)`` rows."""

    def __init__(self, height: int, width: int, channels: int) -> None:
        self.height, self.width, self.channels = height, width, channels
        self.data = torch.zeros((height + 2) * (width + 2), channels)

    def padded_index(self, index: torch.Tensor) -> torch.Tensor:
        """Rows of ``data`` holding the unpadded flat positions ``index``."""
        return index + (index // self.width) * 2 + (self.width + 3)

    def interior(self) -> torch.Tensor:
        """The unpadded map as a ``(H, W, C)`` view."""
        return self.data.view(self.height + 2, self.width + 2, self.channels)[1:-1, 1:-1]

    def nchw(self) -> torch.Tensor:
        """The padded map as a ``(1, C, H + 2, W + 2)`` channels-last view (no copy)."""
        return self.data.view(1, self.height + 2, self.width + 2, self.channels).permute(0, 3, 1, 2)

    def write_all(self, values: torch.Tensor) -> None:
        """Overwrite the interior with ``values (H * W, C)``."""
        self.interior().copy_(values.view(self.height, self.width, self.channels))


class SparseConv:
    """A convolution evaluated at chosen output positions: gather receptive fields, one matmul.

    ``weight (Cout, Cin, kh, kw)`` with zero padding ``(ph, pw)`` of at most one pixel; the
    input is a :class:`PaddedMap` of size ``in_size``. Above ``dense_fraction`` of the output
    positions, the whole map is convolved instead (then the asked positions are picked out).
    """

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor,
        stride: int,
        *,
        padding: tuple[int, int],
        in_size: tuple[int, int],
        dense_fraction: float,
    ) -> None:
        cout, cin, kh, kw = weight.shape
        ph, pw = padding
        if ph > 1 or pw > 1:
            raise ValueError(f"padding {padding}: stored maps have a one-pixel border")
        self.stride, self.padding, self.kernel = stride, padding, (kh, kw)
        self.in_h, self.in_w = in_size
        self.out_h = (self.in_h + 2 * ph - kh) // stride + 1
        self.out_w = (self.in_w + 2 * pw - kw) // stride + 1
        self.dense_fraction = dense_fraction
        self.weight = weight.detach().contiguous()
        self.bias = bias.detach().contiguous()
        # rows ordered (ky, kx, cin), matching the gathered patches
        self.matrix = self.weight.permute(2, 3, 1, 0).reshape(kh * kw * cin, cout).contiguous()
        wp = self.in_w + 2
        ky, kx = torch.meshgrid(torch.arange(kh), torch.arange(kw), indexing="ij")
        self.offsets = (ky * wp + kx).flatten()
        self.cin = cin

    @property
    def out_positions(self) -> int:
        return self.out_h * self.out_w

    def affected(self, index: torch.Tensor) -> torch.Tensor:
        """Output positions whose receptive field contains any input position in ``index``."""
        return pooled_positions(
            index, (self.in_h, self.in_w), self.kernel, self.stride, self.padding
        )

    def dense(self, source: PaddedMap) -> torch.Tensor:
        """All outputs, ``(out_h * out_w, Cout)``."""
        ph, pw = self.padding
        x = source.nchw()[:, :, 1 - ph : source.height + 1 + ph, 1 - pw : source.width + 1 + pw]
        out = F.conv2d(x, self.weight, self.bias, stride=self.stride)
        return out.permute(0, 2, 3, 1).reshape(self.out_positions, -1)

    def at(self, source: PaddedMap, out_index: torch.Tensor) -> torch.Tensor:
        """Outputs at the flat output positions ``out_index``, ``(n, Cout)``.

        Patches are gathered and multiplied in chunks that stay in the CPU's cache: one big
        patch matrix costs several times more once it spills to memory.
        """
        if out_index.numel() > self.dense_fraction * self.out_positions:
            return self.dense(source).index_select(0, out_index)
        ph, pw = self.padding
        oy = torch.div(out_index, self.out_w, rounding_mode="floor")
        ox = out_index - oy * self.out_w
        base = (oy * self.stride + (1 - ph)) * (self.in_w + 2) + ox * self.stride + (1 - pw)
        out = torch.empty(out_index.numel(), self.matrix.shape[1])
        chunk = max(64, PATCH_CHUNK_FLOATS // self.matrix.shape[0])
        for start in range(0, out_index.numel(), chunk):
            rows = (base[start : start + chunk].unsqueeze(1) + self.offsets).flatten()
            patches = source.data.index_select(0, rows).view(-1, self.matrix.shape[0])
            torch.addmm(self.bias, patches, self.matrix, out=out[start : start + chunk])
        return out


class BilinearUpsample:
    """``F.interpolate(mode="bilinear", align_corners=False)`` from ``in_size`` to ``out_size``, at
    chosen outputs."""

    def __init__(self, in_size: tuple[int, int], out_size: tuple[int, int]) -> None:
        self.in_h, self.in_w = in_size
        self.out_h, self.out_w = out_size
        self.y0, self.y1, self.wy = bilinear_axis(self.in_h, self.out_h)
        self.x0, self.x1, self.wx = bilinear_axis(self.in_w, self.out_w)

    def affected(self, index: torch.Tensor) -> torch.Tensor:
        """Output positions that read any input position in ``index``."""
        mask = torch.zeros(self.in_h * self.in_w, dtype=torch.bool)
        mask[index] = True
        mask = mask.view(self.in_h, self.in_w)
        rows = mask.index_select(0, self.y0) | mask.index_select(0, self.y1)
        return flat_nonzero(rows.index_select(1, self.x0) | rows.index_select(1, self.x1))

    def at(self, source: torch.Tensor, out_index: torch.Tensor) -> torch.Tensor:
        """Outputs ``(n, C)`` at ``out_index`` of the flat ``(in_h * in_w, C)`` map ``source``."""
        oy = torch.div(out_index, self.out_w, rounding_mode="floor")
        ox = out_index - oy * self.out_w
        y0, y1, x0, x1 = self.y0[oy] * self.in_w, self.y1[oy] * self.in_w, self.x0[ox], self.x1[ox]
        wy, wx = self.wy[oy].unsqueeze(1), self.wx[ox].unsqueeze(1)
        top = torch.lerp(source.index_select(0, y0 + x0), source.index_select(0, y0 + x1), wx)
        bottom = torch.lerp(source.index_select(0, y1 + x0), source.index_select(0, y1 + x1), wx)
        return torch.lerp(top, bottom, wy)

    def dense(self, source: torch.Tensor) -> torch.Tensor:
        channels = source.shape[1]
        x = source.view(1, self.in_h, self.in_w, channels).permute(0, 3, 1, 2)
        out = F.interpolate(x, size=(self.out_h, self.out_w), mode="bilinear", align_corners=False)
        return out.permute(0, 2, 3, 1).reshape(self.out_h * self.out_w, channels)


def bilinear_axis(size_in: int, size_out: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source indices and the weight of the second one, as PyTorch computes them
    (align_corners=False)."""
    scale = size_in / size_out
    src = ((torch.arange(size_out, dtype=torch.float32) + 0.5) * scale - 0.5).clamp(min=0)
    i0 = src.floor().long().clamp(max=size_in - 1)
    i1 = (i0 + 1).clamp(max=size_in - 1)
    return i0, i1, src - i0.float()
