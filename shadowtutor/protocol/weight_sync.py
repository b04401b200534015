"""The weights an edge holds, kept bit-identical on both ends of a session (docs/protocol.md, "Held
weights").

The edge holds whatever it decoded: full weights replace its copy, a partial update
overwrites the tensors it names, and a delta update adds its dequantised deltas to them.
:class:`HeldWeights` is that rule; the edge agent applies every update with it, and the
server's :class:`UpdateEncoder` applies the very blob it sends to a mirror with it too, so
the server always knows the edge's exact float32 weights. A delta is therefore always
taken against what the edge really holds, and quantisation error never accumulates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from shadowtutor.protocol.codecs import TensorBlob, decode_tensors, encode_tensors, is_delta_codec
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.sparse_delta import (
    CoordinateSet,
    SparseDelta,
    decode_sparse,
    encode_sparse,
    is_sparse_codec,
    largest_masks,
)
from shadowtutor.protocol.tensor_layout import layout_of


class HeldWeights:
    """A float32 ``state_dict`` changed only by decoded blobs (empty until the first full weights),
    and the coordinate set sparse updates refer to (``coordinates``, None until one arrives)."""

    def __init__(self) -> None:
        self.state: dict[str, torch.Tensor] = {}
        self.coordinates: CoordinateSet | None = None

    @property
    def layout(self) -> dict[str, tuple[int, ...]]:
        """The name and shape of every held tensor: all a partial update may name."""
        return layout_of(self.state)

    def apply_blob(
        self, tensors: list[dict[str, Any]], payload: bytes, codec: str
    ) -> dict[str, torch.Tensor]:
        """A partial update still encoded (``tensors`` and ``payload`` of its UPDATE, in
        ``codec``): decoded against the held tensors, so that it is refused before anything is
        decompressed when it names one that is not held (or with another shape), and decompresses
        to no more than they take; then applied by :meth:`apply` or :meth:`apply_sparse`. Returns
        the new values of the tensors it changed; a defect raises :class:`ProtocolError` and
        changes nothing."""
        if is_sparse_codec(codec):
            return self.apply_sparse(
                decode_sparse(tensors, payload, codec, self.coordinates, self.layout)
            )
        return self.apply(
            decode_tensors(tensors, payload, codec, self.layout), delta=is_delta_codec(codec)
        )

    def replace(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Full weights: hold exactly these, and no coordinate set."""
        self.state = {name: _float32(tensor) for name, tensor in tensors.items()}
        self.coordinates = None

    def apply_sparse(self, update: SparseDelta) -> dict[str, torch.Tensor]:
        """A sparse update: hold the coordinate set it carries, if any, then add its deltas at the
        set's coordinates. Returns the new values of the tensors it changed. A set naming a tensor
        that is not held, or of another shape, or deltas for a set not held, raise BAD_MESSAGE and
        change nothing."""
        coordinates = update.coordinates if update.coordinates is not None else self.coordinates
        if update.coordinates is not None:
            for name, shape in update.coordinates.shapes.items():
                held = self.state.get(name)
                if held is None or tuple(held.shape) != shape:
                    raise ProtocolError(
                        ErrorCode.BAD_MESSAGE,
                        f"coordinate set names {name!r} with shape {list(shape)}, which the edge "
                        "does not hold",
                    )
        if update.deltas is None:
            self.coordinates = coordinates
            return {}
        if coordinates is None or coordinates.set_id != update.set_id:
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE, f"deltas for coordinate set {update.set_id}, none held"
            )
        new, start = {}, 0
        for name, idx in coordinates.indices.items():
            count = int(idx.numel())
            held = self.state[name]
            deltas = update.deltas[start : start + count]
            if count == held.numel():  # the set holds the whole tensor: indices are 0..n-1
                new[name] = held + deltas.view(held.shape)
            elif count:
                flat = held.reshape(-1).clone()
                flat.index_add_(0, idx, deltas)
                new[name] = flat.view(held.shape)
            start += count
        self.state.update(new)
        self.coordinates = coordinates
        return new

    def apply(self, tensors: Mapping[str, torch.Tensor], delta: bool) -> dict[str, torch.Tensor]:
        """A partial update: new values, or (``delta``) dequantised deltas added to the held ones.

        Returns the new values of the tensors it names. A tensor that is not held, or of another
        shape, raises BAD_MESSAGE and changes nothing.
        """
        for name, value in tensors.items():
            held = self.state.get(name)
            if held is None or held.shape != value.shape:
                shape = None if held is None else list(held.shape)
                raise ProtocolError(
                    ErrorCode.BAD_MESSAGE,
                    f"update of {name!r} with shape {list(value.shape)} does not fit the held "
                    f"tensor ({shape})",
                )
        new = {
            name: self.state[name] + _float32(value) if delta else _float32(value)
            for name, value in tensors.items()
        }
        self.state.update(new)
        return new


def _float32(tensor: torch.Tensor) -> torch.Tensor:
    """A float32 CPU copy (never a view of a parameter that training changes in place)."""
    return tensor.detach().to("cpu", torch.float32, copy=True).contiguous()


class UpdateEncoder:
    """The server's side of one session: encodes weights for the edge and mirrors what it holds.

    ``weight_codec`` (a float codec) carries full weights; ``delta_codec``, when agreed,
    carries partial updates as quantised deltas against :attr:`held`. The server's own weights
    may stay off the held ones (it trains on from its float weights): each delta then also
    carries what earlier rounding left out (error feedback), so the edge stays within half a
    quantisation step of the server instead of drifting.

    A partial update names only the tensors that changed: with a float codec, those whose
    value on the wire differs from the held one; with a delta codec, those whose value differs
    both from the held one and from the value last sent for it. So a key frame whose
    distillation changed nothing gets an update with no tensors, and a rounding residual alone
    waits for the tensor's next real change.
    """

    def __init__(self, weight_codec: str, delta_codec: str | None = None) -> None:
        if is_delta_codec(weight_codec):
            raise ValueError(f"full weights need a float codec, not {weight_codec!r}")
        if delta_codec is not None and not is_delta_codec(delta_codec):
            raise ValueError(f"{delta_codec!r} is not a delta codec")
        self.weight_codec = weight_codec
        self.delta_codec = delta_codec
        self.held = HeldWeights()
        # the server's value of each tensor when it was last sent
        self._sent: dict[str, torch.Tensor] = {}

    def full(self, state: Mapping[str, torch.Tensor]) -> TensorBlob:
        """Every tensor of ``state`` in the float codec; the edge will hold what it decodes."""
        blob = encode_tensors(state, self.weight_codec)
        self.held.replace(decode_tensors(blob.tensors, blob.payload, self.weight_codec))
        self._sent = {key: _float32(value) for key, value in state.items()}
        return blob

    def partial(
        self,
        state: Mapping[str, torch.Tensor],
        keys: list[str],
        coordinates: CoordinateSet | None = None,
    ) -> TensorBlob:
        """The tensors ``keys`` of ``state`` that differ from the held ones, for an edge holding
        :attr:`held`.

        With a sparse delta codec, only the coordinates of ``coordinates`` (the set the server
        trains, required then) travel: the set itself when the edge does not hold it, then deltas
        for all its coordinates when any of them changed since last sent (else an empty payload)."""
        missing = [key for key in keys if key not in self.held.state]
        if missing:
            raise ValueError(f"partial update before full weights: {missing[:3]} are not held")
        if self.delta_codec is None:
            return self._changed_values(state, keys)
        if not is_sparse_codec(self.delta_codec):
            return self._dense_deltas(state, keys, self.delta_codec)
        if coordinates is not None:
            return self._sparse(state, coordinates, self.delta_codec)
        if any(not torch.equal(_float32(state[key]), self._sent[key]) for key in keys):
            raise ValueError(f"{self.delta_codec} needs the coordinate set the server trains")
        return TensorBlob([], b"")

    def residual_coordinates(
        self, state: Mapping[str, torch.Tensor], keys: list[str], fraction: float
    ) -> CoordinateSet | None:
        """The set a sparse update of ``keys`` carries when the server sends the share
        ``fraction`` (in (0, 1]) of their coordinates whose value in ``state`` differs most from
        the held one (largest absolute difference, ties by position), under the next set id.

        None when no tensor of ``keys`` changed since it was last sent (the update is empty) or
        nothing differs from the held values. Coordinates left out stay in the difference, so a
        later update carries them."""
        held = self.held.state
        values = {key: _float32(state[key]) for key in keys}
        if all(torch.equal(values[key], self._sent[key]) for key in keys):
            return None
        residual = {key: (values[key] - held[key]).abs() for key in keys}
        total = sum(difference.numel() for difference in residual.values())
        differing = sum(int(difference.count_nonzero()) for difference in residual.values())
        count = min(max(1, round(fraction * total)), differing)
        if count == 0:
            return None
        previous = self.held.coordinates
        return CoordinateSet.from_masks(
            1 if previous is None else previous.set_id + 1, largest_masks(residual, count)
        )

    def _changed_values(self, state: Mapping[str, torch.Tensor], keys: list[str]) -> TensorBlob:
        """The tensors ``keys`` of ``state`` whose value on the wire (in the float codec) differs
        from the held one, as new values; held from then on."""
        held = self.held.state
        blob = encode_tensors({key: state[key] for key in keys}, self.weight_codec)
        on_wire = decode_tensors(blob.tensors, blob.payload, self.weight_codec)
        changed = [key for key in keys if not torch.equal(on_wire[key], held[key])]
        if len(changed) < len(keys):
            blob = encode_tensors({key: state[key] for key in changed}, self.weight_codec)
        self.held.apply_blob(blob.tensors, blob.payload, self.weight_codec)
        return blob

    def _dense_deltas(
        self, state: Mapping[str, torch.Tensor], keys: list[str], codec: str
    ) -> TensorBlob:
        """The tensors ``keys`` of ``state`` that differ both from the held value and from the
        value last sent, as deltas against the held value in ``codec``; their decoded deltas are
        added to the held ones."""
        held = self.held.state
        values = {key: _float32(state[key]) for key in keys}
        changed = [
            key
            for key, value in values.items()
            if not torch.equal(value, held[key]) and not torch.equal(value, self._sent[key])
        ]
        blob = encode_tensors({key: values[key] - held[key] for key in changed}, codec)
        self._sent.update({key: values[key] for key in changed})
        self.held.apply_blob(blob.tensors, blob.payload, codec)
        return blob

    def _sparse(
        self, state: Mapping[str, torch.Tensor], coordinates: CoordinateSet, codec: str
    ) -> TensorBlob:
        held = self.held.state
        with_set = (
            self.held.coordinates is None or self.held.coordinates.set_id != coordinates.set_id
        )
        names = list(coordinates.indices)
        values = {name: _float32(state[name]) for name in names}
        changed = any(
            not torch.equal(values[name].reshape(-1)[idx], self._sent[name].reshape(-1)[idx])
            for name, idx in coordinates.indices.items()
        )
        deltas = None
        if changed or with_set:
            deltas = torch.cat(
                [
                    (values[name] - held[name]).reshape(-1)[idx]
                    for name, idx in coordinates.indices.items()
                ]
            )
            self._sent.update(values)
        descriptors, payload = encode_sparse(deltas, coordinates, codec, with_set)
        self.held.apply_blob(descriptors, payload, codec)
        return TensorBlob(descriptors, payload)

    def replay(self, tensors: list[dict[str, Any]], payload: bytes, full: bool) -> None:
        """Hold what an edge holding :attr:`held` holds after an update this encoder sent
        (``tensors`` and ``payload`` of its UPDATE, ``full`` its flag), applied by the edge's rule;
        the values last sent become the held ones. BAD_MESSAGE (and nothing changed) for an update
        that does not fit the held weights."""
        codec = self.weight_codec if full or self.delta_codec is None else self.delta_codec
        if full:
            self.held.replace(
                decode_tensors(tensors, payload, codec, self.held.layout, complete=True)
            )
        else:
            self.held.apply_blob(tensors, payload, codec)
        self._sent = {key: value.clone() for key, value in self.held.state.items()}

    def mirror(self, keys: list[str]) -> dict[str, Any]:
        """What :meth:`restore_mirror` needs to go on with partial updates of ``keys`` in another
        process: the held values and the values last sent (float32 CPU copies), and the held
        coordinate set."""
        held_set = self.held.coordinates
        coordinates = (
            None
            if held_set is None
            else {
                "set_id": held_set.set_id,
                "shapes": {name: list(shape) for name, shape in held_set.shapes.items()},
                "indices": {name: idx.clone() for name, idx in held_set.indices.items()},
            }
        )
        return {
            "held": {key: self.held.state[key].clone() for key in keys},
            "sent": {key: self._sent[key].clone() for key in keys},
            "coordinates": coordinates,
        }

    def restore_mirror(self, mirror: Mapping[str, Any]) -> None:
        """Hold what :meth:`mirror` returned: the next partial update is what this encoder's would
        have been."""
        self.held.state = {key: _float32(value) for key, value in mirror["held"].items()}
        self._sent = {key: _float32(value) for key, value in mirror["sent"].items()}
        saved = mirror.get("coordinates")
        self.held.coordinates = (
            None
            if saved is None
            else CoordinateSet(
                int(saved["set_id"]),
                {name: tuple(shape) for name, shape in saved["shapes"].items()},
                {name: idx.to(torch.int64) for name, idx in saved["indices"].items()},
            )
        )
