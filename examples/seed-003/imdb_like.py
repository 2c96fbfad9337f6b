"""An IMDB-shaped TFDS dataset, made here from generated reviews: ``tfds:imdb_reviews`` for a
machine that has no copy of the real one (the tests use it too).

    python examples/seed-003/imdb_like.py DATA_DIR [--train 400] [--test 100]

writes ``DATA_DIR/imdb_reviews/plain_text/1.0.0/`` with TensorFlow Datasets' own builder API
(a ``GeneratorBasedBuilder``'s ``download_and_prepare`` over local JSONL files): the layout,
features (``text``: Text, ``label``: ClassLabel ``neg``/``pos``) and splits (``train``,
``test``) of the real ``imdb_reviews``. Then ``TFDS_DATA_DIR=DATA_DIR`` and
``examples/seed-003-imdb.toml`` trains on it. Where the real IMDB is prepared
(``tfds build imdb_reviews``), use that instead: nothing here is needed.

The reviews are sentences drawn from a positive or a negative pool around neutral ones, so
the label is in the words, never in a fixed position; ``reviews(n, seed)`` is deterministic.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

POSITIVE = [
    "The acting was superb and every scene felt alive.", "I loved the soundtrack from start to finish.",
    "A warm, funny and beautifully shot film.", "The story kept me hooked and the ending was perfect.",
    "One of the best performances I have seen in years.", "It is a delight, clever and full of heart.",
    "The director handles the quiet moments with real grace.", "I would happily watch it again tomorrow.",
    "The cast has wonderful chemistry and the jokes land.", "A moving, memorable picture that earns its tears.",
    "Gorgeous photography and a script that trusts its audience.", "I left the cinema smiling.",
]
NEGATIVE = [
    "The acting was wooden and every scene dragged.", "I hated the soundtrack, it never stopped.",
    "A dull, lifeless and badly shot film.", "The story made no sense and the ending was awful.",
    "One of the worst performances I have seen in years.", "It is a chore, clumsy and without heart.",
    "The director smothers every quiet moment.", "I would not watch it again if you paid me.",
    "The cast has no chemistry and the jokes fall flat.", "A tedious picture that wastes two hours.",
    "Ugly photography and a script that insults its audience.", "I left the cinema annoyed.",
]
NEUTRAL = [
    "I saw it on a Sunday afternoon.", "The film runs a little under two hours.",
    "It is based on a novel from the seventies.", "My friend recommended it last week.",
    "Most of it takes place in a small coastal town.", "The lead actor also produced it.",
    "It was shown with subtitles.", "There is a long flashback in the middle.",
]


def reviews(n: int, seed: int = 0) -> list[dict[str, object]]:
    """``n`` reviews ``{"text", "label"}``, half positive (label 1), in a seeded order."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        label = i % 2
        pool = POSITIVE if label else NEGATIVE
        sentences = rng.sample(pool, 2) + rng.sample(NEUTRAL, 2)
        rng.shuffle(sentences)
        out.append({"text": " ".join(sentences), "label": label})
    rng.shuffle(out)
    return out


def build(data_dir: str | Path, *, train: int = 400, test: int = 100, seed: int = 0) -> Path:
    """Write the dataset into ``data_dir`` (TFDS's prepared layout); returns its version folder."""
    import tensorflow_datasets as tfds

    source = Path(tempfile.mkdtemp(prefix="imdb-like-"))
    for split, n, s in (("train", train, seed), ("test", test, seed + 1)):
        (source / f"{split}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in reviews(n, s)), encoding="utf-8")

    class ImdbReviews(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        name = "imdb_reviews"
        VERSION = tfds.core.Version("1.0.0")
        BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="plain_text", description="plain text")]

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self, description="IMDB-shaped reviews made by examples/seed-003/imdb_like.py",
                features=tfds.features.FeaturesDict({
                    "text": tfds.features.Text(),
                    "label": tfds.features.ClassLabel(names=["neg", "pos"])}),
                supervised_keys=("text", "label"))

        def _split_generators(self, dl_manager):
            return {split: self._generate_examples(source / f"{split}.jsonl") for split in ("train", "test")}

        def _generate_examples(self, path):
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f):
                    yield i, json.loads(line)

    builder = ImdbReviews(data_dir=str(data_dir), config="plain_text")
    builder.download_and_prepare()
    return Path(builder.data_dir)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data_dir")
    p.add_argument("--train", type=int, default=400)
    p.add_argument("--test", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    print(build(a.data_dir, train=a.train, test=a.test, seed=a.seed))


if __name__ == "__main__":
    main()
