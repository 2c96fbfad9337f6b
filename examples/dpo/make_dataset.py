"""Writes the short-answer preference set for DPO after the answer-format SFT run: the same
kinds of questions as examples/answer-format/, each with a chosen answer that is the short
form (the `Answer:` line alone) and a rejected one that is the long form the SFT run learnt
(`Answer:` then a `Reason:` line). A short DPO run from that SFT run (its reference and its
starting point) learns a measurable preference: shorter answers, reward accuracy on held-out
pairs. Deterministic; run it to regenerate the files beside it:

    python examples/dpo/make_dataset.py

train.jsonl: pairs from examples/answer-format/train.jsonl, in TRL's prompt/chosen/rejected
layout; eval.jsonl: pairs from examples/answer-format/eval.jsonl (questions neither run trains
on), as chat-message lists for chosen and rejected (the other layout the reader takes). The
compare prompts are examples/answer-format/prompts.txt (in neither).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SFT = HERE.parent / "answer-format"
TRAIN_PAIRS = 64


def pairs(path: Path) -> list[tuple[str, str, str]]:
    """(question, short answer, long answer) of each conversation of an answer-format file."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        user, assistant = json.loads(line)["messages"]
        long = assistant["content"]
        short = long.split("\n", 1)[0]
        assert short.startswith("Answer: ") and "\nReason: " in long, long
        out.append((user["content"], short, long))
    return out


def main() -> None:
    train = pairs(SFT / "train.jsonl")
    random.Random(33).shuffle(train)
    train = train[:TRAIN_PAIRS]
    held = pairs(SFT / "eval.jsonl")
    with open(HERE / "train.jsonl", "w", encoding="utf-8") as f:
        for prompt, short, long in train:
            f.write(json.dumps({"prompt": prompt, "chosen": short, "rejected": long}) + "\n")
    with open(HERE / "eval.jsonl", "w", encoding="utf-8") as f:
        for prompt, short, long in held:
            user = {"role": "user", "content": prompt}
            f.write(json.dumps({"chosen": [user, {"role": "assistant", "content": short}],
                                "rejected": [user, {"role": "assistant", "content": long}]}) + "\n")
    print(f"train.jsonl {len(train)} pairs, eval.jsonl {len(held)} pairs")


if __name__ == "__main__":
    main()
