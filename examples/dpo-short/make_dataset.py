"""Writes the short-over-rambling preference set: DPO from the pretrained base (or an -it
model) that should make the answers shorter. Each question of examples/answer-format/ gets a
chosen answer of one sentence and a rejected answer that says the same sentence inside
60-80 words of filler (openers, hedges, restatements, offers to say more), drawn at random
from pools of sentences, so no two rejected answers are the same. Deterministic; run it to
regenerate the files beside it:

    python examples/dpo-short/make_dataset.py

train.jsonl: the 160 questions of examples/answer-format/train.jsonl (TRL's prompt/chosen/
rejected layout); eval.jsonl: the 22 of its eval.jsonl (held out: no training prompt among
them); prompts.txt: those 22 and the 12 of examples/answer-format/prompts.txt (in neither
set), for `compare --prompts` (bench/dpo_270m.py measures words per answer on them).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "answer-format"

OPENERS = [
    "That is a really interesting question, and it is one that a lot of people ask.",
    "Great question! Let me think about this carefully before I answer.",
    "Thank you for asking. This is something worth going through step by step.",
    "Well, there are a few different ways to look at a question like this one.",
    "Sure, I would be happy to help you with that question.",
    "This is a good question, and the answer is a little more interesting than it looks.",
]
MIDDLES = [
    "Before I answer, it helps to remember what the question is really asking.",
    "People have been curious about questions like this for a very long time.",
    "To put it another way, the short answer is only part of the whole story.",
    "It is always worth double-checking facts like this in a good reference book.",
    "Many people get this one wrong at first, so it is good that you asked.",
    "When we think about it slowly, each part of the question makes more sense.",
    "In everyday life this kind of thing comes up more often than you might expect.",
    "Of course, there is always more that could be said about a topic like this.",
    "Teachers often use this very example because it is so easy to remember.",
    "If you look at it from a slightly different angle, the same answer appears.",
]
CLOSERS = [
    "I hope this explanation makes sense and gives you the full picture.",
    "Let me know if you would like me to go into more detail about any part of it.",
    "I hope that helps, and feel free to ask me any other questions you have.",
    "So that is my answer, although there is always more to learn about it.",
]


def questions(path: Path) -> list[tuple[str, str]]:
    """(question, one-sentence answer) of each conversation of an answer-format file: the
    answer is its `Reason:` sentence, which states the answer."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        user, assistant = json.loads(line)["messages"]
        reason = assistant["content"].split("\nReason: ", 1)[1].strip()
        out.append((user["content"], reason[:1].upper() + reason[1:]))
    return out


def rambling(question: str, short: str, rng: random.Random) -> str:
    middle = rng.sample(MIDDLES, 2)
    said = short[:1].lower() + short[1:]
    return " ".join([rng.choice(OPENERS), middle[0], f'So, to come back to your question, "{question}" {said}',
                     middle[1], rng.choice(CLOSERS)])


def main() -> None:
    rng = random.Random(41)
    train = questions(SOURCE / "train.jsonl")
    held = questions(SOURCE / "eval.jsonl")
    with open(HERE / "train.jsonl", "w", encoding="utf-8") as f:
        for q, short in train:
            f.write(json.dumps({"prompt": q, "chosen": short, "rejected": rambling(q, short, rng)}) + "\n")
    with open(HERE / "eval.jsonl", "w", encoding="utf-8") as f:
        for q, short in held:
            f.write(json.dumps({"prompt": q, "chosen": short, "rejected": rambling(q, short, rng)}) + "\n")
    unseen = (SOURCE / "prompts.txt").read_text(encoding="utf-8").split("\n")
    prompts = [q for q, _ in held] + [p for p in unseen if p.strip()]
    assert not set(prompts) & {q for q, _ in train}, "a compare prompt is a training prompt"
    (HERE / "prompts.txt").write_text("\n".join(prompts) + "\n", encoding="utf-8")
    words = [len(rambling(q, s, random.Random(0)).split()) for q, s in train]
    print(f"train.jsonl {len(train)} pairs, eval.jsonl {len(held)} pairs, prompts.txt {len(prompts)} "
          f"prompts; rejected answers {min(words)}-{max(words)} words")


if __name__ == "__main__":
    main()
