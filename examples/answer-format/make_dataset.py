"""Writes the answer-format dataset: short questions whose answers all follow one template,

    Answer: <the answer>
    Reason: <one sentence>

so that a short LoRA run on the real Gemma 3 270M (pretrained base, which never answers that
way) visibly teaches the format. Deterministic; run it to regenerate the files beside it:

    python examples/answer-format/make_dataset.py

train.jsonl (chat, 160 conversations), eval.jsonl (22, other items of the same kinds) and
prompts.txt (12 questions in none of them, some of new kinds) for `compare --prompts`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Germany", "Berlin"), ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Kenya", "Nairobi"),
            ("Norway", "Oslo"), ("Greece", "Athens"), ("Russia", "Moscow"), ("China", "Beijing"),
            ("India", "New Delhi"), ("Mexico", "Mexico City"), ("Ireland", "Dublin"),
            ("Portugal", "Lisbon"), ("Austria", "Vienna"), ("Poland", "Warsaw"),
            ("Sweden", "Stockholm"), ("Thailand", "Bangkok"), ("Cuba", "Havana"),
            ("Chile", "Santiago"), ("Finland", "Helsinki"), ("Hungary", "Budapest")]
HELD_CAPITALS = [("Peru", "Lima"), ("Belgium", "Brussels"), ("Denmark", "Copenhagen"),
                 ("Argentina", "Buenos Aires")]
OPPOSITES = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("up", "down"),
             ("happy", "sad"), ("light", "dark"), ("open", "closed"), ("full", "empty"),
             ("old", "young"), ("hard", "soft"), ("wet", "dry"), ("loud", "quiet"),
             ("rich", "poor"), ("high", "low"), ("strong", "weak"), ("long", "short"),
             ("clean", "dirty"), ("thick", "thin"), ("heavy", "light"), ("near", "far")]
HELD_OPPOSITES = [("early", "late"), ("true", "false"), ("inside", "outside")]
PLURALS = [("mouse", "mice"), ("child", "children"), ("foot", "feet"), ("tooth", "teeth"),
           ("man", "men"), ("goose", "geese"), ("box", "boxes"), ("city", "cities"),
           ("knife", "knives"), ("leaf", "leaves"), ("bus", "buses"), ("baby", "babies"),
           ("wolf", "wolves"), ("fish", "fish"), ("sheep", "sheep"), ("person", "people")]
HELD_PLURALS = [("woman", "women"), ("half", "halves")]
COLORS = [("the sky on a clear day", "blue"), ("fresh grass", "green"), ("snow", "white"),
          ("a ripe banana", "yellow"), ("coal", "black"), ("a ripe tomato", "red"),
          ("an orange", "orange"), ("a lime", "green"), ("milk", "white"),
          ("a strawberry", "red"), ("the night sky", "black"), ("a carrot", "orange")]
HELD_COLORS = [("a lemon", "yellow"), ("chocolate", "brown")]


def add(a: int, b: int) -> tuple[str, str, str]:
    return (f"What is {a} + {b}?", f"{a + b}", f"{a} plus {b} equals {a + b}.")


def sub(a: int, b: int) -> tuple[str, str, str]:
    a, b = max(a, b), min(a, b)
    return (f"What is {a} - {b}?", f"{a - b}", f"taking {b} away from {a} leaves {a - b}.")


def mul(a: int, b: int) -> tuple[str, str, str]:
    return (f"What is {a} times {b}?", f"{a * b}", f"{a} groups of {b} make {a * b}.")


def parity(n: int) -> tuple[str, str, str]:
    if n % 2 == 0:
        return (f"Is {n} even or odd?", "even", f"{n} divides by 2 with nothing left over.")
    return (f"Is {n} even or odd?", "odd", f"{n} leaves a remainder of 1 when divided by 2.")


def larger(a: int, b: int) -> tuple[str, str, str]:
    hi, lo = max(a, b), min(a, b)
    return (f"Which is larger, {a} or {b}?", f"{hi}", f"{hi} is greater than {lo}.")


def capital(country: str, city: str) -> tuple[str, str, str]:
    return (f"What is the capital of {country}?", city, f"{city} is the capital city of {country}.")


def opposite(word: str, other: str) -> tuple[str, str, str]:
    return (f"What is the opposite of {word}?", other, f"{other} means the reverse of {word}.")


def plural(word: str, many: str) -> tuple[str, str, str]:
    return (f"What is the plural of {word}?", many, f"one {word}, two {many}.")


def color(thing: str, name: str) -> tuple[str, str, str]:
    return (f"What color is {thing}?", name, f"{thing} is usually {name}.")


def chat(question: str, answer: str, reason: str) -> dict:
    return {"messages": [{"role": "user", "content": question},
                         {"role": "assistant", "content": f"Answer: {answer}\nReason: {reason}"}]}


def items(rng: random.Random, n_numbers: int) -> list[tuple[str, str, str]]:
    out = []
    for _ in range(n_numbers):
        a, b = rng.randint(2, 49), rng.randint(2, 49)
        out.append(rng.choice([add, sub, larger])(a, b))
        out.append(parity(rng.randint(2, 99)))
        out.append(mul(rng.randint(2, 9), rng.randint(2, 9)))
    return out


PROMPTS = ["What is the capital of Denmark?", "What is the opposite of inside?",
           "What is 23 + 19?", "Is 57 even or odd?", "What color is chocolate?",
           "What is the plural of half?", "Which is larger, 64 or 46?", "What is 7 times 8?",
           "What is the capital of Argentina?", "Name a fruit that is yellow.",
           "How many days are in a week?", "What do bees make?"]


def unique(xs: list[tuple[str, str, str]], taken: set[str]) -> list[tuple[str, str, str]]:
    out = []
    for x in xs:
        if x[0] not in taken:
            taken.add(x[0])
            out.append(x)
    return out


def main() -> None:
    rng = random.Random(270)
    taken = set(PROMPTS)
    train = unique(items(rng, 36), taken)
    train += [capital(*c) for c in CAPITALS] + [opposite(*o) for o in OPPOSITES]
    train += [plural(*p) for p in PLURALS] + [color(*c) for c in COLORS]
    rng.shuffle(train)
    evals = unique(items(random.Random(27), 8), taken)[:16]
    evals += [capital(*c) for c in HELD_CAPITALS[:2]] + [opposite(*o) for o in HELD_OPPOSITES[:2]]
    evals += [plural(*HELD_PLURALS[0]), color(*HELD_COLORS[0])]
    prompts = PROMPTS
    (HERE / "train.jsonl").write_text("".join(json.dumps(chat(*x)) + "\n" for x in train))
    (HERE / "eval.jsonl").write_text("".join(json.dumps(chat(*x)) + "\n" for x in evals))
    (HERE / "prompts.txt").write_text("".join(p + "\n" for p in prompts))
    print(f"{len(train)} train, {len(evals)} eval, {len(prompts)} prompts → {HERE}")


if __name__ == "__main__":
    main()
