"""Convert a float TFLite segmentation model (MediaPipe's) into an ONNX graph onnxruntime runs.

Covers the operators MediaPipe's segmentation models use, MediaPipe's own
``Convolution2DTransposeBias`` included (which stock TFLite runtimes lack). Activations are
laid out NCHW in the ONNX graph (TFLite's are NHWC); weights are transposed to match. The
model's single-channel probability output ``(N, 1, H, W)`` is thresholded into class indices
``(N, H, W)`` (int64) through a lookup table, so the result is a labels model for
:class:`shadowtutor.teachers.onnx.OnnxTeacher`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.teachers.base import TeacherError

OPSET = 17
# TensorType FLOAT32, FLOAT16
_FLOAT_TYPES = {0: np.float32, 1: np.float16}
_INT_TYPES = {2: np.int32, 4: np.int64}
# tflite Padding SAME / VALID -> onnx auto_pad
_PADDING = {0: "SAME_UPPER", 1: "VALID"}
# ActivationFunctionType NONE, RELU (others refused)
_ACTIVATIONS = {0: None, 1: "Relu"}
# a model, tensor, operator or options table of the tflite package (which has no types)
TfliteObject = Any


@dataclass(kw_only=True)
class _Graph:
    """The ONNX graph under construction: nodes, constants and the tflite tensors they stand for."""

    nodes: list = field(default_factory=list)
    initializers: list = field(default_factory=list)
    # tflite tensor -> value (NHWC)
    constants: dict[int, np.ndarray] = field(default_factory=dict)
    # tflite tensor -> onnx value name
    names: dict[int, str] = field(default_factory=dict)
    counter: int = 0

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}_{self.counter}"

    def constant(self, value: np.ndarray, stem: str = "const") -> str:
        from onnx import numpy_helper

        name = self.fresh(stem)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: Sequence[str], output: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        output = output or self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [output], **attrs))
        return output


def _tensor_value(model: TfliteObject, tensor: TfliteObject) -> np.ndarray | None:
    """The constant data of a tflite tensor, or None for an activation."""
    data = model.Buffers(tensor.Buffer()).DataAsNumpy()
    if isinstance(data, int) or data.size == 0:
        return None
    dtype = _FLOAT_TYPES.get(tensor.Type()) or _INT_TYPES.get(tensor.Type())
    if dtype is None:
        raise TeacherError(
            f"tensor {tensor.Name()!r} has unsupported type {tensor.Type()} (quantised models are "
            "not)"
        )
    return np.frombuffer(data.tobytes(), dtype=dtype).reshape(tensor.ShapeAsNumpy())


class _Converter:
    """Turns one TFLite flatbuffer (a single subgraph) into an ONNX graph, operator by operator."""

    def __init__(self, buffer: bytes) -> None:
        import tflite

        self.tflite = tflite
        self.model = tflite.Model.GetRootAsModel(buffer, 0)
        if self.model.SubgraphsLength() != 1:
            raise TeacherError(
                f"expected one subgraph, the model has {self.model.SubgraphsLength()}"
            )
        self.sub = self.model.Subgraphs(0)
        self.graph = _Graph()
        builtin = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
        self.opnames: list[str] = []
        for i in range(self.model.OperatorCodesLength()):
            code = self.model.OperatorCodes(i)
            custom = code.CustomCode()
            builtin_code = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            self.opnames.append(custom.decode() if custom else builtin[builtin_code])
        for i in range(self.sub.TensorsLength()):
            value = _tensor_value(self.model, self.sub.Tensors(i))
            if value is not None:
                self.graph.constants[i] = value

    # -- helpers -------------------------------------------------------------------------------
    def shape(self, index: int) -> list[int]:
        return [int(d) for d in self.sub.Tensors(index).ShapeAsNumpy()]

    def value(self, index: int) -> str:
        """The ONNX name of tflite tensor ``index``; constants become NCHW-broadcastable
        initializers."""
        if index not in self.graph.names:
            const = self.graph.constants.get(index)
            if const is None:
                raise TeacherError(f"tensor {index} is read before it is written")
            const = const.astype(np.float32) if const.dtype == np.float16 else const
            if const.ndim == 4:
                const = const.transpose(0, 3, 1, 2)
            elif const.ndim == 1 and const.size > 1:
                const = const.reshape(1, -1, 1, 1)
            self.graph.names[index] = self.graph.constant(const)
        return self.graph.names[index]

    def weight(self, index: int) -> np.ndarray:
        const = self.graph.constants.get(index)
        if const is None:
            raise TeacherError(f"tensor {index} should be a constant weight")
        return const.astype(np.float32)

    def activate(self, value: str, fused: int, out: int) -> None:
        if fused not in _ACTIVATIONS:
            raise TeacherError(f"unsupported fused activation {fused}")
        act = _ACTIVATIONS[fused]
        self.graph.names[out] = self.graph.node(act, [value]) if act else value

    def options(self, op: TfliteObject, cls: type) -> TfliteObject:
        table = op.BuiltinOptions()
        opts = cls()
        opts.Init(table.Bytes, table.Pos)
        return opts

    # -- operators -----------------------------------------------------------------------------
    def convert(self) -> tuple[str, list[int], str, list[int]]:
        handlers: dict[str, Callable] = {
            "CONV_2D": self.conv,
            "DEPTHWISE_CONV_2D": self.depthwise,
            "DEQUANTIZE": self.dequantize,
            "ADD": self.binary,
            "MUL": self.binary,
            "RELU": self.unary,
            "HARD_SWISH": self.unary,
            "LOGISTIC": self.unary,
            "AVERAGE_POOL_2D": self.avg_pool,
            "MEAN": self.mean,
            "RESIZE_BILINEAR": self.resize,
            "Convolution2DTransposeBias": self.transpose_conv,
        }
        if self.sub.InputsLength() != 1 or self.sub.OutputsLength() != 1:
            raise TeacherError("expected a model with one input and one output")
        inp, outp = self.sub.Inputs(0), self.sub.Outputs(0)
        self.graph.names[inp] = "image"
        for j in range(self.sub.OperatorsLength()):
            op = self.sub.Operators(j)
            name = self.opnames[op.OpcodeIndex()]
            if name not in handlers:
                raise TeacherError(f"operator {name} is not supported by this converter")
            handlers[name](op, name)
        return "image", self.shape(inp), self.graph.names[outp], self.shape(outp)

    def dequantize(self, op: TfliteObject, name: str) -> None:
        self.graph.constants[op.Outputs(0)] = self.weight(op.Inputs(0))

    def unary(self, op: TfliteObject, name: str) -> None:
        onnx_op = {"RELU": "Relu", "HARD_SWISH": "HardSwish", "LOGISTIC": "Sigmoid"}[name]
        self.graph.names[op.Outputs(0)] = self.graph.node(onnx_op, [self.value(op.Inputs(0))])

    def binary(self, op: TfliteObject, name: str) -> None:
        opts = self.options(op, self.tflite.AddOptions if name == "ADD" else self.tflite.MulOptions)
        out = self.graph.node(
            name.capitalize(), [self.value(op.Inputs(0)), self.value(op.Inputs(1))]
        )
        self.activate(out, opts.FusedActivationFunction(), op.Outputs(0))

    def conv(self, op: TfliteObject, name: str) -> None:
        opts = self.options(op, self.tflite.Conv2DOptions)
        # OHWI -> OIHW
        weight = self.weight(op.Inputs(1)).transpose(0, 3, 1, 2)
        self._conv(
            op,
            weight,
            1,
            [opts.StrideH(), opts.StrideW()],
            [opts.DilationHFactor(), opts.DilationWFactor()],
            opts.Padding(),
            opts.FusedActivationFunction(),
        )

    def depthwise(self, op: TfliteObject, name: str) -> None:
        opts = self.options(op, self.tflite.DepthwiseConv2DOptions)
        # 1,H,W,C*M -> C*M,1,H,W
        weight = self.weight(op.Inputs(1)).transpose(3, 0, 1, 2)
        groups = self.shape(op.Inputs(0))[3]
        self._conv(
            op,
            weight,
            groups,
            [opts.StrideH(), opts.StrideW()],
            [opts.DilationHFactor(), opts.DilationWFactor()],
            opts.Padding(),
            opts.FusedActivationFunction(),
        )

    def _conv(
        self,
        op: TfliteObject,
        weight: np.ndarray,
        groups: int,
        strides: list[int],
        dilations: list[int],
        padding: int,
        fused: int,
    ) -> None:
        inputs = [self.value(op.Inputs(0)), self.graph.constant(weight, "weight")]
        if op.InputsLength() > 2 and op.Inputs(2) >= 0:
            inputs.append(self.graph.constant(self.weight(op.Inputs(2)), "bias"))
        out = self.graph.node(
            "Conv",
            inputs,
            kernel_shape=list(weight.shape[2:]),
            strides=strides,
            dilations=dilations,
            group=groups,
            auto_pad=_PADDING[padding],
        )
        self.activate(out, fused, op.Outputs(0))

    def transpose_conv(self, op: TfliteObject, name: str) -> None:
        padding, stride_w, stride_h = struct.unpack("<3i", op.CustomOptionsAsNumpy().tobytes()[:12])
        # O,H,W,I -> I,O,H,W
        weight = self.weight(op.Inputs(1)).transpose(3, 0, 1, 2)
        bias = self.graph.constant(self.weight(op.Inputs(2)), "bias")
        in_h, in_w = self.shape(op.Inputs(0))[1:3]
        out_h, out_w = self.shape(op.Outputs(0))[1:3]
        kh, kw = weight.shape[2:]
        # TFLite SAME padding: the output is input * stride; the surplus is trimmed, the larger half
        # at the end.
        pads = [
            max((in_h - 1) * stride_h + kh - out_h, 0),
            max((in_w - 1) * stride_w + kw - out_w, 0),
        ]
        begin = [p // 2 for p in pads] if padding == 1 else [0, 0]
        end = [p - b for p, b in zip(pads, begin, strict=True)] if padding == 1 else pads
        self.graph.names[op.Outputs(0)] = self.graph.node(
            "ConvTranspose",
            [self.value(op.Inputs(0)), self.graph.constant(weight, "weight"), bias],
            kernel_shape=[kh, kw],
            strides=[stride_h, stride_w],
            pads=begin + end,
        )

    def avg_pool(self, op: TfliteObject, name: str) -> None:
        opts = self.options(op, self.tflite.Pool2DOptions)
        out = self.graph.node(
            "AveragePool",
            [self.value(op.Inputs(0))],
            kernel_shape=[opts.FilterHeight(), opts.FilterWidth()],
            strides=[opts.StrideH(), opts.StrideW()],
            auto_pad=_PADDING[opts.Padding()],
        )
        self.activate(out, opts.FusedActivationFunction(), op.Outputs(0))

    def mean(self, op: TfliteObject, name: str) -> None:
        opts = self.options(op, self.tflite.ReducerOptions)
        axes = sorted(int(a) for a in self.graph.constants[op.Inputs(1)].ravel())
        if axes != [1, 2]:
            raise TeacherError(
                f"MEAN over axes {axes} is not supported (only the spatial axes 1, 2)"
            )
        self.graph.names[op.Outputs(0)] = self.graph.node(
            "ReduceMean", [self.value(op.Inputs(0))], axes=[2, 3], keepdims=int(opts.KeepDims())
        )

    def resize(self, op: TfliteObject, name: str) -> None:
        opts = self.options(op, self.tflite.ResizeBilinearOptions)
        height, width = (int(v) for v in self.graph.constants[op.Inputs(1)].ravel())
        n, _, _, c = self.shape(op.Inputs(0))
        mode = (
            "align_corners"
            if opts.AlignCorners()
            else "half_pixel"
            if opts.HalfPixelCenters()
            else "asymmetric"
        )
        sizes = self.graph.constant(np.array([n, c, height, width], dtype=np.int64), "sizes")
        self.graph.names[op.Outputs(0)] = self.graph.node(
            "Resize",
            [self.value(op.Inputs(0)), "", "", sizes],
            mode="linear",
            coordinate_transformation_mode=mode,
        )


def convert_segmenter(
    tflite_path: str | Path,
    onnx_path: str | Path,
    lut: Sequence[int],
    class_names: Sequence[str],
    threshold: float = 0.5,
    metadata: dict[str, str] | None = None,
) -> Path:
    """Write ``onnx_path``: input NCHW RGB in [0, 1], output class indices ``lut[p > threshold]``.

    ``lut``: the task's class index for the model's "no" (0) and "yes" (1) answer. ``metadata``:
    extra entries for the model's metadata (licence, source); ``class_names`` is added.
    """
    import json

    import onnx
    from onnx import TensorProto, helper

    converter = _Converter(Path(tflite_path).read_bytes())
    in_name, in_shape, prob, out_shape = converter.convert()
    if in_shape[0] != 1 or in_shape[3] != 3 or out_shape[3] != 1:
        raise TeacherError(
            f"expected an RGB image in and one probability channel out, got {in_shape} -> "
            f"{out_shape}"
        )
    graph = converter.graph
    above = graph.node(
        "Greater", [prob, graph.constant(np.array(threshold, dtype=np.float32), "threshold")]
    )
    index = graph.node("Cast", [above], to=TensorProto.INT64)
    squeezed = graph.node("Squeeze", [index, graph.constant(np.array([1], dtype=np.int64), "axis")])
    graph.node(
        "Gather",
        [graph.constant(np.asarray(lut, dtype=np.int64), "lut"), squeezed],
        output="labels",
    )
    _, h, w, _ = in_shape
    model = helper.make_model(
        helper.make_graph(
            graph.nodes,
            "segmenter",
            [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, [1, 3, h, w])],
            [helper.make_tensor_value_info("labels", TensorProto.INT64, [1, h, w])],
            graph.initializers,
        ),
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="shadowtutor.tflite_to_onnx",
    )
    entries = {**(metadata or {}), "class_names": json.dumps(list(class_names))}
    helper.set_model_props(model, entries)
    onnx.checker.check_model(model)
    out = Path(onnx_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    onnx.save(model, tmp)
    tmp.replace(out)
    return out
