"""What installing an update costs the edge: decode and add, ``q8delta+zstd`` against a whole-set
``q4sparse+zstd`` update (the residual choice's default), on the packaged student's trainable tensors.

The server's ``UpdateEncoder`` encodes ``--updates`` updates of random Adam-sized changes
(``--step`` times a standard normal per coordinate) for each codec; the edge's ``HeldWeights``
decodes and installs each; the median time per update and the mean bytes are printed as JSON.
Both codecs run in the same process, interleaved, so their ratio holds on a busy machine.

Usage: ``python lab/scripts/update_install_cost.py [--updates 30] [--threads 1]``
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from shadowtutor.models.pretrained import load_default_student
from shadowtutor.protocol.codecs import decode_tensors
from shadowtutor.protocol.sparse_delta import decode_sparse
from shadowtutor.protocol.weight_sync import HeldWeights, UpdateEncoder

CODECS = ("q8delta+zstd", "q4sparse+zstd")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--step", type=float, default=1e-3, help="size of a coordinate's change per update")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    student = load_default_student().model
    state = {key: value.detach().clone().float() for key, value in student.state_dict().items()}
    keys = student.trainable_keys("partial")
    pairs = {codec: (UpdateEncoder("f32", codec), HeldWeights()) for codec in CODECS}
    for encoder, edge in pairs.values():
        welcome = encoder.full(state)
        edge.replace(decode_tensors(welcome.tensors, welcome.payload, "f32"))
    times: dict[str, list[float]] = {codec: [] for codec in CODECS}
    sizes: dict[str, list[int]] = {codec: [] for codec in CODECS}
    generator = torch.Generator().manual_seed(0)
    for _ in range(args.updates):
        for key in keys:
            state[key] += args.step * torch.randn(state[key].shape, generator=generator)
        for codec, (encoder, edge) in pairs.items():
            if codec == "q4sparse+zstd":
                blob = encoder.partial(state, keys, encoder.residual_coordinates(state, keys, 1.0))
                start = time.perf_counter()
                edge.apply_sparse(decode_sparse(blob.tensors, blob.payload, codec, edge.coordinates))
            else:
                blob = encoder.partial(state, keys)
                start = time.perf_counter()
                edge.apply(decode_tensors(blob.tensors, blob.payload, codec), delta=True)
            times[codec].append(time.perf_counter() - start)
            sizes[codec].append(len(blob.payload))
    values = sum(state[key].numel() for key in keys)
    print(json.dumps({
        "values": values, "updates": args.updates, "threads": args.threads, "machine": platform.processor()
        or platform.machine(),
        **{codec: {"median_ms": 1000 * statistics.median(times[codec]),
                   "mean_bytes": statistics.mean(sizes[codec])} for codec in CODECS},
    }, indent=2))


if __name__ == "__main__":
    main()
