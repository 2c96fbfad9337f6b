"""Decoding options shared by ``sample`` and ``compare`` (no heavy imports)."""

from __future__ import annotations

import argparse
import logging
from typing import Any


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding")
    g.add_argument("--max-new-tokens", type=int, default=64, metavar="N", help="stop after N tokens (64)")
    g.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0, metavar="K", help="keep the K likeliest tokens (0 = off)")
    g.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling (1.0 = off)")
    g.add_argument("--seed", type=int, default=0, metavar="S", help="sampling seed (0)")
    g.add_argument("--raw", action="store_true",
                   help="send the prompt as raw text, without the Gemma chat template")
    g.add_argument("--step", type=int, default=None, metavar="N",
                   help="checkpoint step of the run (default: the latest)")


def settings_from(args: argparse.Namespace) -> Any:
    from adapters_lib.sample import SamplingSettings

    return SamplingSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                            top_k=args.top_k, top_p=args.top_p, seed=args.seed)


def quiet_engine_logs() -> None:
    for noisy in ("absl", "jax", "orbax", "tensorflow"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
