"""Packing: sequences → rows of ``max_length`` tokens, and rows → the batch arrays (contract).

Packing puts several short sequences in one row; ``segment_ids`` (1..n per row, 0 = padding)
and ``positions`` (restarting at 0 per sequence) keep them apart: the train step builds
``mask[b,i,j] = seg[b,i]==seg[b,j] & seg[b,i]!=0 & j<=i``, so no token attends across
sequences and each sequence's loss equals its unpacked loss.

The row layout of an epoch is a pure function of (the lengths, the epoch's permutation):
first-fit over a small window of open rows, in the shuffled order.
"""

from __future__ import annotations

import numpy as np

from adapters_lib.data.tokenize import TokenizedSet

OPEN_ROWS = 64
"""How many partly-filled rows first-fit keeps open; more packs tighter, mixes order more."""


def pack_rows(lengths: np.ndarray, order: np.ndarray, max_length: int, *, packing: bool = True,
              open_rows: int = OPEN_ROWS) -> list[list[int]]:
    """Group sequence indices (visited in ``order``) into rows of at most ``max_length`` tokens."""
    if not packing:
        return [[int(i)] for i in order]
    rows: list[list[int]] = []
    open_: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = int(lengths[i])
        for k, r in enumerate(room):
            if r >= n:
                open_[k].append(int(i))
                room[k] -= n
                if room[k] == 0:
                    rows.append(open_.pop(k))
                    room.pop(k)
                break
        else:
            open_.append([int(i)])
            room.append(max_length - n)
            if room[-1] == 0:
                rows.append(open_.pop())
                room.pop()
            elif len(open_) > open_rows:
                k = int(np.argmin(room))
                rows.append(open_.pop(k))
                room.pop(k)
    rows.extend(open_)
    return rows


def assemble(tset: TokenizedSet, rows: list[list[int]], batch_size: int, max_length: int,
             ) -> dict[str, np.ndarray]:
    """Build one batch from ``rows`` (at most ``batch_size``; missing rows are all padding)."""
    shape = (batch_size, max_length)
    tokens = np.zeros(shape, np.int32)
    targets = np.zeros(shape, np.int32)
    loss_mask = np.zeros(shape, np.float32)
    positions = np.zeros(shape, np.int32)
    segment_ids = np.zeros(shape, np.int32)
    for b, row in enumerate(rows[:batch_size]):
        at = 0
        for s, i in enumerate(row, 1):
            ids, trained = tset.sequence(i)
            n = len(ids)
            tokens[b, at:at + n] = ids
            targets[b, at:at + n - 1] = ids[1:]
            loss_mask[b, at:at + n - 1] = trained[1:]
            positions[b, at:at + n] = np.arange(n, dtype=np.int32)
            segment_ids[b, at:at + n] = s
            at += n
    return {"tokens": tokens, "targets": targets, "loss_mask": loss_mask,
            "positions": positions, "segment_ids": segment_ids}


def attention_mask(segment_ids: np.ndarray) -> np.ndarray:
    """The contract mask ``[B, L, L]`` (bool) for a batch; numpy, for tests and previews."""
    seg = segment_ids
    same = seg[:, :, None] == seg[:, None, :]
    causal = np.tril(np.ones((seg.shape[1], seg.shape[1]), bool))[None]
    return same & (seg[:, :, None] != 0) & causal
