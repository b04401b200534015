"""The paper's fully-convolutional student network (ShadowTutor, Figure 3).

Module and parameter names follow the authors' released checkpoint so that its
``state_dict`` loads unchanged. The network is split into a frozen *front*
(``in_conv1`` .. ``dec1``) and a trainable *back* (``dec2`` onward) so that partial
distillation can compute the front once per key frame and train the back alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

DistillMode = Literal["partial", "full"]

PIXEL_MEAN_BGR = (103.530, 116.280, 123.675)
FRONT_MODULES = ("in_conv1", "in_conv2", "enc1", "enc2", "enc3", "dec1")
BACK_MODULES = ("dec2", "dec3", "out_conv1", "out_conv2", "out_conv3")


class StudentBlock(nn.Module):
    """Pre-activated residual block: BN(frame statistics) + ReLU, then 3x3 / 1x3 / 3x1.

    Where the channel count changes, the shortcut is a strided 1x1 convolution of the
    pre-activated input; otherwise it is the input itself, strided by slicing.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.preact_path = nn.Sequential(
            nn.BatchNorm2d(in_channels, track_running_stats=False), nn.ReLU()
        )
        self.short_path = (
            nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride)
            if in_channels != out_channels
            else None
        )
        self.long_path = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1),
            nn.ReLU(),
            nn.Conv2d(out_channels, out_channels, kernel_size=(1, 3), padding=(0, 1)),
            nn.Conv2d(out_channels, out_channels, kernel_size=(3, 1), padding=(1, 0)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        preact = self.preact_path(x)
        if self.short_path is not None:
            short = self.short_path(preact)
        else:
            short = x[:, :, :: self.stride, :: self.stride] if self.stride > 1 else x
        return short + self.long_path(preact)

    @property
    def norm(self) -> nn.BatchNorm2d:
        """The pre-activation's normalisation (``preact_path[0]``)."""
        return cast(nn.BatchNorm2d, self.preact_path[0])

    @property
    def convs(self) -> tuple[nn.Conv2d, nn.Conv2d, nn.Conv2d]:
        """The long path's 3x3 (with the block's stride), 1x3 and 3x1 convolutions."""
        long = self.long_path
        return cast(nn.Conv2d, long[0]), cast(nn.Conv2d, long[2]), cast(nn.Conv2d, long[3])


def conv_bias(conv: nn.Conv2d) -> torch.Tensor:
    """The bias of one of the student's convolutions; every one has a bias (ValueError
    otherwise)."""
    if conv.bias is None:
        raise ValueError(f"the convolution {conv} has no bias")
    return conv.bias


@dataclass(kw_only=True)
class FrontFeatures:
    """What the frozen front hands to the trainable back (constant during partial distillation)."""

    # dec1 output upsampled to enc2's size
    dec1: torch.Tensor
    enc2: torch.Tensor
    enc1: torch.Tensor
    x1_size: tuple[int, int]
    input_size: tuple[int, int]

    def detached(self) -> FrontFeatures:
        return FrontFeatures(
            dec1=self.dec1.detach(),
            enc2=self.enc2.detach(),
            enc1=self.enc1.detach(),
            x1_size=self.x1_size,
            input_size=self.input_size,
        )


def conv_output_size(size: tuple[int, int], stride: int) -> tuple[int, int]:
    """Size after a 3x3 convolution with padding 1 and ``stride`` (the student's strided layers)."""
    return (size[0] - 1) // stride + 1, (size[1] - 1) // stride + 1


# Each block's input map, by the name :func:`map_sizes` gives it (dec2 and dec3 read concatenations
# at that size).
BLOCK_INPUTS = {
    "enc1": "x2",
    "enc2": "enc1",
    "enc3": "enc2",
    "dec1": "enc3",
    "dec2": "enc2",
    "dec3": "enc1",
}


def map_sizes(size: tuple[int, int]) -> dict[str, tuple[int, int]]:
    """``(height, width)`` of the student's maps for a ``size`` input: in_conv1's output ``x1``,
    in_conv2's ``x2`` and the encoder blocks' outputs (each strides by 2; the decoder works at those
    sizes)."""
    sizes = {}
    for name in ("x1", "x2", "enc1", "enc2", "enc3"):
        size = conv_output_size(size, 2)
        sizes[name] = size
    return sizes


def block_input_sizes(size: tuple[int, int]) -> dict[str, tuple[int, int]]:
    """``(height, width)`` of each block's input for a ``size`` input."""
    sizes = map_sizes(size)
    return {block: sizes[source] for block, source in BLOCK_INPUTS.items()}


def upsample(x: torch.Tensor, size: tuple[int, int] | torch.Size) -> torch.Tensor:
    """``x (N, C, h, w)`` resized to ``size`` by the student's bilinear upsampling
    (``align_corners=False``)."""
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


class StudentNet(nn.Module):
    """Input: normalised BGR tensor ``(N, 3, H, W)``; output: class logits ``(N, C, H, W)``."""

    def __init__(self, num_classes: int = 9) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"the student needs at least 2 classes, got {num_classes}")
        self.num_classes = num_classes
        self.in_conv1 = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1)
        self.in_conv2 = nn.Conv2d(8, 8, kernel_size=3, stride=2, padding=1)
        self.enc1 = StudentBlock(8, 64, stride=2)
        self.enc2 = StudentBlock(64, 64, stride=2)
        self.enc3 = StudentBlock(64, 128, stride=2)
        self.dec1 = StudentBlock(128, 64, stride=1)
        self.dec2 = StudentBlock(128, 32, stride=1)
        self.dec3 = StudentBlock(96, 32, stride=1)
        self.out_conv1 = nn.Conv2d(32, 32, kernel_size=3, padding=1)
        self.out_conv2 = nn.Conv2d(32, 32, kernel_size=3, padding=1)
        self.out_conv3 = nn.Conv2d(32, num_classes, kernel_size=1)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward_front(self, x: torch.Tensor) -> FrontFeatures:
        x1 = self.in_conv1(x)
        x2 = self.in_conv2(x1)
        enc1 = self.enc1(x2)
        enc2 = self.enc2(enc1)
        enc3 = self.enc3(enc2)
        dec1 = upsample(self.dec1(enc3), enc2.shape[2:])
        return FrontFeatures(
            dec1=dec1,
            enc2=enc2,
            enc1=enc1,
            x1_size=(x1.shape[2], x1.shape[3]),
            input_size=(x.shape[2], x.shape[3]),
        )

    def forward_back(self, front: FrontFeatures) -> torch.Tensor:
        return self.forward_tail(self.forward_dec3(front), front)

    def forward_dec3(self, front: FrontFeatures) -> torch.Tensor:
        """The back up to the dec3 block's output, before its upsampling (at enc1's resolution)."""
        dec2 = upsample(self.dec2(torch.cat([front.dec1, front.enc2], dim=1)), front.enc1.shape[2:])
        return self.dec3(torch.cat([dec2, front.enc1], dim=1))

    def forward_tail(self, dec3: torch.Tensor, front: FrontFeatures) -> torch.Tensor:
        """The linear tail as written: dec3's output upsampled, ``out_conv1`` to ``out_conv3``, the
        last upsampling."""
        out = self.out_conv2(self.out_conv1(upsample(dec3, front.x1_size)))
        return self.out_conv3(upsample(out, front.input_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_back(self.forward_front(x))

    def module_names(self, mode: DistillMode) -> tuple[str, ...]:
        """Names of the top-level modules that distillation trains in ``mode``."""
        if mode == "partial":
            return BACK_MODULES
        if mode == "full":
            return FRONT_MODULES + BACK_MODULES
        raise ValueError(f"unknown distillation mode {mode!r}; use 'partial' or 'full'")

    def trainable_keys(self, mode: DistillMode) -> list[str]:
        """``state_dict`` keys that distillation changes in ``mode`` (what an update carries)."""
        prefixes = tuple(f"{name}." for name in self.module_names(mode))
        return [key for key in self.state_dict() if key.startswith(prefixes)]

    def set_trainable(self, mode: DistillMode) -> list[nn.Parameter]:
        """Freeze everything outside ``mode``'s modules; return the trainable parameters."""
        names = set(self.module_names(mode))
        params: list[nn.Parameter] = []
        for name, child in self.named_children():
            train = name in names
            child.requires_grad_(train)
            if train:
                params.extend(child.parameters())
        return params


def normalise_frame(
    frame_bgr: torch.Tensor | object, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """BGR ``uint8`` image ``(H, W, 3)`` (NumPy or tensor) -> normalised ``(1, 3, H, W)`` float
    tensor."""
    tensor = torch.as_tensor(frame_bgr, device=device)
    if tensor.ndim != 3 or tensor.shape[2] != 3:
        raise ValueError(f"expected a BGR frame of shape (H, W, 3), got {tuple(tensor.shape)}")
    mean = torch.tensor(PIXEL_MEAN_BGR, dtype=torch.float32, device=tensor.device)
    return (tensor.float() - mean).permute(2, 0, 1).unsqueeze(0).contiguous()
