"""``shadowtutor bounds``: the analytic throughput and traffic bounds (eqs. 8, 12, 14, 15)."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bounds", help="throughput and traffic bounds of the analytic model")
    p.add_argument("--t-si", type=float, required=True, help="student inference latency, s")
    p.add_argument("--t-sd", type=float, required=True, help="one distillation step, s")
    p.add_argument("--t-ti", type=float, required=True, help="teacher inference latency, s")
    p.add_argument("--t-net", type=float, required=True, help="network latency of one key frame, s")
    p.add_argument("--s-net-mb", type=float, required=True, help="data per key frame, MB (10^6 bytes)")
    p.add_argument("--min-stride", type=int, default=8)
    p.add_argument("--max-stride", type=int, default=64)
    p.add_argument("--max-updates", type=int, default=8)
    p.add_argument("--advise-max-updates", action="store_true",
                   help="also print the largest MAX_UPDATES whose lower bound stays >= --min-fps")
    p.add_argument("--min-fps", type=float, help="throughput floor for --advise-max-updates")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor.algorithms.bounds import Latencies, advise_max_updates, compute_bounds

    if args.advise_max_updates and args.min_fps is None:
        raise ValueError("--advise-max-updates needs --min-fps")
    lat = Latencies(t_si=args.t_si, t_sd=args.t_sd, t_ti=args.t_ti, t_net=args.t_net, s_net_bytes=args.s_net_mb * 1e6)
    result: dict[str, float | int | None] = dict(
        compute_bounds(lat, args.min_stride, args.max_stride, args.max_updates).to_dict()
    )
    if args.advise_max_updates:
        result["advised_max_updates"] = advise_max_updates(lat, args.min_stride, args.min_fps)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"throughput: {result['throughput_fps_min']:.3f} .. {result['throughput_fps_max']:.3f} FPS")
    print(f"traffic:    {result['traffic_mbps_min']:.3f} .. {result['traffic_mbps_max']:.3f} Mbps")
    if args.advise_max_updates:
        advised = result["advised_max_updates"]
        print(f"advised MAX_UPDATES for >= {args.min_fps} FPS: "
              + ("none (even 0 updates miss it)" if advised is None else str(advised)))
    return 0
