"""The student's layers as change-based stages: each keeps the caches it needs between frames.

A stage takes the :class:`~shadowtutor.acceleration.change_based.sparse_ops.Change` of its
input (or None: nothing changed), detects which input positions moved by more than its
threshold against the value it last computed with (that value is kept: the *effective* input),
recomputes only the outputs whose receptive field holds such a position, and hands their new
values on. With ``full=True`` a stage takes its whole input as changed and recomputes every
output (first frame, periodic refresh, after a weight update). Every cached output therefore
equals the layer applied to its effective input; at threshold 0 that is the true input.
"""

from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from shadowtutor.acceleration.change_based.sparse_ops import (
    BilinearUpsample,
    Change,
    PaddedMap,
    SparseConv,
    bilinear_axis,
    flat_nonzero,
    pooled_positions,
)
from shadowtutor.models.fast_student import (
    TAIL_REGIONS,
    TAIL_UPSCALE,
    channel_argmax,
    fold_head,
    tail_scores,
)
from shadowtutor.models.student import (
    PIXEL_MEAN_BGR,
    StudentBlock,
    StudentNet,
    conv_bias,
    conv_output_size,
)

Size = tuple[int, int]


def union(indices: list[torch.Tensor], positions: int) -> torch.Tensor:
    """Sorted union of flat position sets."""
    if len(indices) == 1:
        return indices[0]
    mask = torch.zeros(positions, dtype=torch.bool)
    for index in indices:
        mask[index] = True
    return flat_nonzero(mask)


def detect(stored: torch.Tensor, rows: torch.Tensor, change: Change, tau: float) -> torch.Tensor:
    """Positions of ``change`` that moved by more than ``tau`` (any channel) from ``stored[rows]``;
    those are written into ``stored``. Returns the indices into ``change`` that moved."""
    old = stored.index_select(0, rows)
    moved = flat_nonzero((change.values - old).abs_().amax(1) > tau)
    stored[rows[moved]] = change.values[moved]
    return moved


class ConvStage:
    """Change detection on a padded input map, then a sparse convolution."""

    def __init__(self, conv: SparseConv, channels: int) -> None:
        self.conv = conv
        self.input = PaddedMap(conv.in_h, conv.in_w, channels)
        self.changed_fraction = 0.0

    def step(self, change: Change | None, tau: float, full: bool) -> Change | None:
        changed = None
        if change is not None:
            rows = self.input.padded_index(change.index)
            if full:
                self.input.data[rows] = change.values
            else:
                changed = change.index[detect(self.input.data, rows, change, tau)]
        positions = self.input.height * self.input.width
        if full:
            self.changed_fraction = 1.0
            return Change(torch.arange(self.conv.out_positions), self.conv.dense(self.input))
        self.changed_fraction = 0.0 if changed is None else changed.numel() / positions
        if changed is None or changed.numel() == 0:
            return None
        out_index = self.conv.affected(changed)
        return Change(out_index, self.conv.at(self.input, out_index))


class InputStage:
    """The frame (BGR uint8) and ``in_conv1``: changes are pixels that moved more than tau grey
    levels."""

    def __init__(self, conv: SparseConv) -> None:
        self.conv = conv
        h, w = conv.in_h, conv.in_w
        self.reference = torch.zeros(h, w, 3, dtype=torch.uint8)
        self.input = PaddedMap(h, w, 3)
        self.mean = torch.tensor(PIXEL_MEAN_BGR, dtype=torch.float32)

    def moved(self, frame: np.ndarray, tau: float) -> torch.Tensor:
        """Flat positions where ``frame`` differs from the reference by more than ``tau`` in any
        channel (OpenCV's vectorised absdiff and max: several times faster than the same in
        torch)."""
        blue, green, red = cv2.split(cv2.absdiff(frame, self.reference.numpy()))
        return torch.from_numpy(np.flatnonzero(cv2.max(cv2.max(blue, green), red) > tau))

    def step(self, frame: torch.Tensor, moved: torch.Tensor | None) -> Change | None:
        """``moved`` from :meth:`moved`, or None: the whole frame (a full evaluation)."""
        if moved is None:
            self.reference.copy_(frame)
            self.input.write_all(frame.reshape(-1, 3).float() - self.mean)
            return Change(torch.arange(self.conv.out_positions), self.conv.dense(self.input))
        if moved.numel() == 0:
            return None
        pixels = frame.view(-1, 3).index_select(0, moved)
        self.reference.view(-1, 3)[moved] = pixels
        self.input.data[self.input.padded_index(moved)] = pixels.float() - self.mean
        out_index = self.conv.affected(moved)
        return Change(out_index, self.conv.at(self.input, out_index))

    def accept(self, frame: torch.Tensor) -> None:
        """Take ``frame`` as the reference without computing (it went to the full-frame
        fallback)."""
        self.reference.copy_(frame)


class BlockStage:
    """A :class:`StudentBlock` whose normalisation follows the frame's statistics exactly.

    The block input's per-channel sums are updated (float64) from the positions that changed,
    so the mean and variance are always the current frame's, as in full-frame inference. When
    they move, every position of the normalised map moves a little: the block's threshold is
    applied to the normalised map (all positions), so only the positions that moved by more
    than it are recomputed; at threshold 0 everything is, and the result is exact.
    """

    def __init__(self, block: StudentBlock, in_size: Size, dense_fraction: float) -> None:
        norm = block.norm
        self.channels = norm.num_features
        self.gamma = norm.weight.detach().double()
        self.beta = norm.bias.detach().double()
        self.eps = norm.eps
        self.in_size = in_size
        self.positions = in_size[0] * in_size[1]
        self.stride = block.stride
        self.out_size = conv_output_size(in_size, block.stride)
        first, conv2, conv3 = block.convs
        self.out_channels = first.out_channels
        self.first = SparseConv(
            first.weight,
            conv_bias(first),
            block.stride,
            padding=(1, 1),
            in_size=in_size,
            dense_fraction=dense_fraction,
        )
        short = block.short_path
        # the 1x1 shortcut reads the same (normalised) input
        self.short_conv = (
            None
            if short is None
            else SparseConv(
                short.weight,
                conv_bias(short),
                block.stride,
                padding=(0, 0),
                in_size=in_size,
                dense_fraction=dense_fraction,
            )
        )
        self.conv2 = ConvStage(
            SparseConv(
                conv2.weight,
                conv_bias(conv2),
                1,
                padding=(0, 1),
                in_size=self.out_size,
                dense_fraction=dense_fraction,
            ),
            self.out_channels,
        )
        self.conv3 = ConvStage(
            SparseConv(
                conv3.weight,
                conv_bias(conv3),
                1,
                padding=(1, 0),
                in_size=self.out_size,
                dense_fraction=dense_fraction,
            ),
            self.out_channels,
        )
        out_positions = self.out_size[0] * self.out_size[1]
        self.x = torch.zeros(self.positions, self.channels)
        self.preact = PaddedMap(*in_size, self.channels)
        self.short = torch.zeros(out_positions, self.out_channels)
        self.long = torch.zeros(out_positions, self.out_channels)
        self.sums = torch.zeros(2, self.channels, dtype=torch.float64)
        self.changed_fraction = 0.0

    def _normalisation(self, exact: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Scale and shift of the normalisation now; ``exact`` recomputes the sums from ``x``
        first."""
        if exact:
            x = self.x.double()
            self.sums = torch.stack([x.sum(0), (x * x).sum(0)])
        mean = self.sums[0] / self.positions
        var = (self.sums[1] / self.positions - mean * mean).clamp(min=0)
        scale = self.gamma / (var + self.eps).sqrt()
        return scale.float(), (self.beta - mean * scale).float()

    def _take(self, change: Change, offset: int) -> None:
        """Write one (concatenated) part of the input into ``x`` and its sums."""
        columns = slice(offset, offset + change.values.shape[1])
        old = self.x.index_select(0, change.index)[:, columns].double()
        new = change.values.double()
        self.x[change.index, columns] = change.values
        self.sums[0, columns] += (new - old).sum(0)
        self.sums[1, columns] += (new * new - old * old).sum(0)

    def step(
        self, parts: list[tuple[Change | None, int]], taus: dict[str, float], name: str, full: bool
    ) -> Change | None:
        """``parts``: the changes of the concatenated inputs with their first channel."""
        given = [(change, offset) for change, offset in parts if change is not None]
        for change, offset in given:
            self._take(change, offset)
        first: torch.Tensor | None
        if full:
            scale, shift = self._normalisation(exact=True)
            self.preact.write_all(torch.relu(self.x * scale + shift))
            self.changed_fraction = 1.0
            out_index = torch.arange(self.short.shape[0])
            first = self.first.dense(self.preact)
            short = None if self.short_conv is None else self.short_conv.dense(self.preact)
        elif given:
            scale, shift = self._normalisation(exact=False)
            normalised = torch.relu(self.x * scale + shift)
            stored = self.preact.interior().reshape(self.positions, self.channels)
            changed = flat_nonzero((normalised - stored).abs_().amax(1) > taus[name])
            self.preact.data[self.preact.padded_index(changed)] = normalised.index_select(
                0, changed
            )
            self.changed_fraction = changed.numel() / self.positions
            out_index = self.first.affected(changed) if changed.numel() else changed
            first = self.first.at(self.preact, out_index) if changed.numel() else None
            short = (
                None
                if self.short_conv is None or first is None
                else self.short_conv.at(self.preact, out_index)
            )
        else:
            self.changed_fraction = 0.0
            out_index, first = torch.empty(0, dtype=torch.long), None
        h1 = None
        if first is not None:
            self.short[out_index] = (
                short if short is not None else self._identity_shortcut(out_index)
            )
            h1 = Change(out_index, torch.relu(first))
        h2 = self.conv2.step(h1, taus[f"{name}.conv2"], full)
        h3 = self.conv3.step(h2, taus[f"{name}.conv3"], full)
        if h3 is not None:
            self.long[h3.index] = h3.values
            out_index = (
                union([out_index, h3.index], self.short.shape[0]) if out_index.numel() else h3.index
            )
        if out_index.numel() == 0:
            return None
        return Change(
            out_index, self.short.index_select(0, out_index) + self.long.index_select(0, out_index)
        )

    def _identity_shortcut(self, out_index: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            return self.x.index_select(0, out_index)
        oy = torch.div(out_index, self.out_size[1], rounding_mode="floor")
        ox = out_index - oy * self.out_size[1]
        return self.x.index_select(0, oy * self.stride * self.in_size[1] + ox * self.stride)


class UpsampleStage:
    """Bilinear upsampling; keeps its (dense) input."""

    def __init__(
        self, in_size: Size, out_size: Size, channels: int, *, dense_fraction: float
    ) -> None:
        self.up = BilinearUpsample(in_size, out_size)
        self.source = torch.zeros(in_size[0] * in_size[1], channels)
        self.out_positions = out_size[0] * out_size[1]
        self.dense_fraction = dense_fraction

    def step(self, change: Change | None, full: bool) -> Change | None:
        if change is not None:
            self.source[change.index] = change.values
        if full:
            return Change(torch.arange(self.out_positions), self.up.dense(self.source))
        if change is None:
            return None
        out_index = self.up.affected(change.index)
        if out_index.numel() > self.dense_fraction * self.out_positions:
            return Change(out_index, self.up.dense(self.source).index_select(0, out_index))
        return Change(out_index, self.up.at(self.source, out_index))


def dilated(index: torch.Tensor, size: Size) -> torch.Tensor:
    """Flat positions of an ``size`` grid within one step (8-neighbourhood) of any position in
    ``index``."""
    return pooled_positions(index, size, 3, 1, 1)


class TailStage:
    """dec3's output -> class scores (the fused tail,
    :func:`~shadowtutor.models.fast_student.fold_tail`) -> labels (x2 bilinear upsampling, argmax),
    block by block.

    The tail's unit is a *block*: one position of dec3's ``(h, w)`` map, whose 4x4 class scores are
    one 3x3 convolution of its neighbourhood; a block's scores feed the 8x8 label *tile* of its own
    and those of its neighbours. For frames whose sides are multiples of 8 (then every block and
    tile lies on this grid, exactly); :class:`UnfusedTailStage` takes the others.
    """

    def __init__(self, folded: dict[str, tuple[torch.Tensor, torch.Tensor]], grid: Size) -> None:
        h, w = grid
        self.grid = grid
        self.folded = folded
        scale = TAIL_UPSCALE
        weights = [folded[region][0] for region in TAIL_REGIONS]
        classes_phases, channels = weights[0].shape[:2]
        self.classes = classes_phases // scale**2
        # per region, the (9 * C, classes * 16) matrix for patches gathered as (tap y, tap x,
        # channel)
        self.matrices = [
            wt.permute(2, 3, 1, 0).reshape(9 * channels, classes_phases).contiguous()
            for wt in weights
        ]
        self.biases = [folded[region][1] for region in TAIL_REGIONS]
        rows, cols = torch.arange(h), torch.arange(w)
        tap = torch.arange(-1, 2)
        # (h, 3): replication padding
        near_y = (rows.view(-1, 1) + tap).clamp(0, h - 1)
        near_x = (cols.view(-1, 1) + tap).clamp(0, w - 1)
        self.neighbours = (near_y.view(h, 1, 3, 1) * w + near_x.view(1, w, 1, 3)).reshape(h * w, 9)
        # 0 first, 1 inner, 2 last
        row_class = (rows > 0).long() + (rows == h - 1).long()
        col_class = (cols > 0).long() + (cols == w - 1).long()
        self.region = (row_class.view(h, 1) * 3 + col_class.view(1, w)).flatten()
        self.inner = TAIL_REGIONS.index("inner")
        # class-score positions of each block (phase-major), in the (4h, 4w) map
        sh, sw = scale * h, scale * w
        phase = torch.arange(scale)
        score_y = rows.view(-1, 1) * scale + phase
        score_x = cols.view(-1, 1) * scale + phase
        self.block_scores = (
            score_y.view(h, 1, scale, 1) * sw + score_x.view(1, w, 1, scale)
        ).reshape(h * w, -1)
        out = 2 * scale
        # (h, 8): the output rows of each block's tile
        label_y = rows.view(-1, 1) * out + torch.arange(out)
        label_x = cols.view(-1, 1) * out + torch.arange(out)
        self.out_size = (out * h, out * w)
        tile_labels = label_y.view(h, 1, out, 1) * self.out_size[1] + label_x.view(1, w, 1, out)
        self.tile_labels = tile_labels.reshape(h * w, -1)
        # each output pixel's four class-score sources, as the last (x2 bilinear) upsampling reads
        # them
        y0, y1, self.weight_y = bilinear_axis(sh, self.out_size[0])
        x0, x1, self.weight_x = bilinear_axis(sw, self.out_size[1])

        def sources(ys: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
            return (ys[label_y].view(h, 1, out, 1) * sw + xs[label_x].view(1, w, 1, out)).reshape(
                h * w, -1
            )

        self.pixel_sources = torch.stack(
            [sources(y0, x0), sources(y0, x1), sources(y1, x0), sources(y1, x1)], 2
        )
        self.source = torch.zeros(h * w, channels)
        self.logits = torch.zeros(sh * sw, self.classes)
        # argmax of each position's class scores
        self.score_labels = torch.zeros(sh * sw, dtype=torch.uint8)
        self.labels = torch.zeros(self.out_size[0] * self.out_size[1], dtype=torch.uint8)
        self.changed_fraction = 0.0
        self.output_fraction = 0.0

    def input_map(self) -> torch.Tensor:
        """dec3's output as the tail last computed with it, ``(h * w, C)``."""
        return self.source

    def step(self, change: Change | None, tau: float, tau_output: float, full: bool) -> np.ndarray:
        """``tau`` thresholds dec3's output, ``tau_output`` the class scores (per block: its largest
        move)."""
        self.changed_fraction = self.output_fraction = 0.0
        if full:
            if change is not None:
                self.source[change.index] = change.values
            self._all()
        elif change is not None:
            moved = change.index[detect(self.source, change.index, change, tau)]
            self.changed_fraction = moved.numel() / self.source.shape[0]
            if moved.numel():
                self._blocks(dilated(moved, self.grid), tau_output)
        return self.labels.view(self.out_size).numpy().copy()

    def _all(self) -> None:
        h, w = self.grid
        dec3 = self.source.view(1, h, w, -1).permute(0, 3, 1, 2)
        scores = tail_scores(dec3, self.folded)
        self.logits.copy_(scores[0].permute(1, 2, 0).reshape(-1, self.classes))
        self.score_labels.copy_(channel_argmax(scores).flatten())
        labels = channel_argmax(
            F.interpolate(scores, size=self.out_size, mode="bilinear", align_corners=False)
        )
        self.labels.copy_(labels.flatten())
        self.changed_fraction = self.output_fraction = 1.0

    def _blocks(self, blocks: torch.Tensor, tau_output: float) -> None:
        """Recompute the class scores of ``blocks``; where they moved by more than ``tau_output``,
        the labels."""
        taps = self.neighbours.index_select(0, blocks).flatten()
        patches = self.source.index_select(0, taps).view(blocks.numel(), -1)
        scores = torch.addmm(self.biases[self.inner], patches, self.matrices[self.inner])
        regions = self.region.index_select(0, blocks)
        for region in regions.unique().tolist():
            if region != self.inner:
                rows = flat_nonzero(regions == region)
                scores[rows] = torch.addmm(
                    self.biases[region], patches[rows], self.matrices[region]
                )
        new = scores.view(blocks.numel(), self.classes, -1).transpose(1, 2)
        positions = self.block_scores.index_select(0, blocks)
        old = self.logits.index_select(0, positions.flatten()).view_as(new)
        moved = flat_nonzero((new - old).abs_().amax((1, 2)) > tau_output)
        self.output_fraction = moved.numel() / self.source.shape[0]
        if not moved.numel():
            return
        written = positions.index_select(0, moved).flatten()
        scores = new.index_select(0, moved).reshape(-1, self.classes)
        self.logits[written] = scores
        self.score_labels[written] = scores.argmax(1).to(torch.uint8)
        self._label_tiles(dilated(blocks.index_select(0, moved), self.grid))

    def _label_tiles(self, tiles: torch.Tensor) -> None:
        """Labels of the 8x8 output tiles of ``tiles``. A pixel whose four sources have one label
        gets it (a convex mix of score vectors that share their first maximum keeps it); the others
        are mixed and compared as the full-frame upsampling and argmax do."""
        sources = self.pixel_sources.index_select(0, tiles).view(-1, 4)
        pixels = self.tile_labels.index_select(0, tiles).flatten()
        near = self.score_labels.index_select(0, sources.flatten()).view(-1, 4)
        labels = near[:, 0].clone()
        mixed = flat_nonzero((near != near[:, :1]).any(1))
        if mixed.numel():
            vectors = self.logits.index_select(0, sources.index_select(0, mixed).flatten()).view(
                -1, 4, self.classes
            )
            where = pixels.index_select(0, mixed)
            wy = self.weight_y.index_select(
                0, torch.div(where, self.out_size[1], rounding_mode="floor")
            ).unsqueeze(1)
            wx = self.weight_x.index_select(0, where % self.out_size[1]).unsqueeze(1)
            top = torch.lerp(vectors[:, 0], vectors[:, 1], wx)
            bottom = torch.lerp(vectors[:, 2], vectors[:, 3], wx)
            labels[mixed] = torch.lerp(top, bottom, wy).argmax(1).to(torch.uint8)
        self.labels[pixels] = labels


class UnfusedTailStage:
    """The tail where it cannot be fused (frame sides not multiples of 8, e.g. 320x180): dec3's
    output upsampled to in_conv1's resolution, out_conv1, the folded head, then the last upsampling
    and argmax, each change-based. ``tau`` thresholds out_conv1's input; the head takes every change
    of out_conv1's output (no threshold point of its own); ``tau_output`` thresholds the class
    scores."""

    def __init__(
        self,
        student: StudentNet,
        dec3_size: Size,
        x1_size: Size,
        *,
        frame_size: Size,
        dense_fraction: float,
    ) -> None:
        s = student
        self.up = UpsampleStage(
            dec3_size, x1_size, s.out_conv1.in_channels, dense_fraction=dense_fraction
        )
        self.hidden = ConvStage(
            SparseConv(
                s.out_conv1.weight,
                conv_bias(s.out_conv1),
                1,
                padding=(1, 1),
                in_size=x1_size,
                dense_fraction=dense_fraction,
            ),
            s.out_conv1.in_channels,
        )
        with torch.no_grad():
            head_weight, head_bias = fold_head(s)
        self.head = ConvStage(
            SparseConv(
                head_weight,
                head_bias,
                1,
                padding=(1, 1),
                in_size=x1_size,
                dense_fraction=dense_fraction,
            ),
            s.out_conv2.in_channels,
        )
        self.scores_up = BilinearUpsample(x1_size, frame_size)
        self.logits = torch.zeros(x1_size[0] * x1_size[1], s.num_classes)
        self.labels = torch.zeros(frame_size[0] * frame_size[1], dtype=torch.uint8)
        self.out_size = frame_size
        self.dense_fraction = dense_fraction
        self.changed_fraction = 0.0
        self.output_fraction = 0.0

    def input_map(self) -> torch.Tensor:
        return self.up.source

    def step(self, change: Change | None, tau: float, tau_output: float, full: bool) -> np.ndarray:
        hidden = self.hidden.step(self.up.step(change, full), tau, full)
        self.changed_fraction = self.hidden.changed_fraction
        scores = self.head.step(hidden, 0.0, full)
        self.output_fraction = 0.0
        if full:
            if scores is not None:
                self.logits[scores.index] = scores.values
            self.output_fraction = 1.0
            self.labels.copy_(self.scores_up.dense(self.logits).argmax(1))
        elif scores is not None:
            moved = scores.index[detect(self.logits, scores.index, scores, tau_output)]
            self.output_fraction = moved.numel() / self.logits.shape[0]
            if moved.numel():
                out_index = self.scores_up.affected(moved)
                if out_index.numel() > self.dense_fraction * self.labels.numel():
                    self.labels.copy_(self.scores_up.dense(self.logits).argmax(1))
                else:
                    self.labels[out_index] = (
                        self.scores_up.at(self.logits, out_index).argmax(1).to(torch.uint8)
                    )
        return self.labels.view(self.out_size).numpy().copy()
