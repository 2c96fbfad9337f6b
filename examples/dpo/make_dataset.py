"""Writes the short-answer preference set: questions whose chosen answer is the short, direct
one and whose rejected answer says the same at length, so that a short DPO run on the real
Gemma 3 270M visibly learns a measurable preference (shorter answers; reward accuracy on
held-out pairs). Deterministic; run it to regenerate the files beside it:

    python examples/dpo/make_dataset.py

train.jsonl (TRL's prompt/chosen/rejected layout), eval.jsonl (held-out items of the same
kinds, chat-message lists for chosen and rejected: the other layout the reader takes) and
prompts.txt (questions in neither) for `compare --prompts`.
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
            ("Chile", "Santiago"), ("Finland", "Helsinki"), ("Hungary", "Budapest"),
            ("Peru", "Lima"), ("Belgium", "Brussels"), ("Denmark", "Copenhagen"),
            ("Argentina", "Buenos Aires"), ("Turkey", "Ankara"), ("Brazil", "Brasilia")]
OPPOSITES = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("up", "down"),
             ("happy", "sad"), ("light", "dark"), ("open", "closed"), ("full", "empty"),
             ("old", "young"), ("hard", "soft"), ("wet", "dry"), ("loud", "quiet"),
             ("rich", "poor"), ("high", "low"), ("strong", "weak"), ("early", "late"),
             ("clean", "dirty"), ("thick", "thin"), ("heavy", "light"), ("near", "far")]
COLORS = [("the sky on a clear day", "blue"), ("fresh grass", "green"), ("snow", "white"),
          ("a ripe banana", "yellow"), ("coal", "black"), ("a ripe tomato", "red"),
          ("an orange", "orange"), ("a lime", "green"), ("milk", "white"),
          ("a strawberry", "red"), ("a lemon", "yellow"), ("chocolate", "brown")]
PADDING = [
    "That is a great question, and I am happy to help you with it. ",
    "Let me think about this carefully before I give you my answer. ",
    "There are many ways to look at this, but the most common answer is clear. ",
]
CLOSING = [
    " I hope this explanation helps, and feel free to ask me anything else you would like to know.",
    " Please let me know if you would like more details about this topic or any related topic.",
    " This is a well-known fact, and many people learn it at school when they are young.",
]


def items() -> list[tuple[str, str, str]]:
    """(prompt, short answer, long answer) for every fact."""
    out = []
    for country, city in CAPITALS:
        out.append((f"What is the capital of {country}?", f"{city}.",
                    f"The capital city of the country of {country} is the city called {city}."))
    for word, opposite in OPPOSITES:
        out.append((f"What is the opposite of {word}?", f"{opposite.capitalize()}.",
                    f"The word that means the opposite of the word {word} is the word {opposite}."))
    for thing, color in COLORS:
        out.append((f"What color is {thing}?", f"{color.capitalize()}.",
                    f"The color that you usually see when you look at {thing} is {color}."))
    for a in range(2, 9):
        for b in (3, 5):
            out.append((f"What is {a} + {b}?", f"{a + b}.",
                        f"When you add the number {a} and the number {b} together, you get {a + b}."))
    return out


def main() -> None:
    rng = random.Random(33)
    rows = items()
    rng.shuffle(rows)
    held = rows[:24]
    train = rows[24:]

    def long(answer: str) -> str:
        return rng.choice(PADDING) + answer + rng.choice(CLOSING)

    with open(HERE / "train.jsonl", "w", encoding="utf-8") as f:
        for prompt, short, verbose in train:
            f.write(json.dumps({"prompt": prompt, "chosen": short, "rejected": long(verbose)}) + "\n")
    with open(HERE / "eval.jsonl", "w", encoding="utf-8") as f:
        for prompt, short, verbose in held:
            user = {"role": "user", "content": prompt}
            f.write(json.dumps({"chosen": [user, {"role": "assistant", "content": short}],
                                "rejected": [user, {"role": "assistant", "content": long(verbose)}]}) + "\n")
    prompts = ["What is the capital of Australia?", "What is the opposite of wide?",
               "What color is a ripe cherry?", "What is 9 + 4?", "What is the capital of Kenya?",
               "What is the opposite of sweet?", "What color is the sun?", "What is 6 + 7?"]
    (HERE / "prompts.txt").write_text("\n".join(prompts) + "\n", encoding="utf-8")
    print(f"train.jsonl {len(train)} pairs, eval.jsonl {len(held)} pairs, prompts.txt {len(prompts)}")


if __name__ == "__main__":
    main()
