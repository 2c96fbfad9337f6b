"""Dataset-cache fixtures: an HF ``datasets`` cache and a TFDS data dir, written by the
libraries' own writers (a ``datasets`` builder's ``download_and_prepare`` into the cache
layout ``load_dataset`` leaves, ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``, and a TFDS
``GeneratorBasedBuilder``'s ``download_and_prepare`` from local files), once a session."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imdb_like():
    """examples/seed-003/imdb_like.py as a module (its ``reviews`` and ``build``)."""
    spec = importlib.util.spec_from_file_location("imdb_like", ROOT / "examples/seed-003/imdb_like.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def hf_cache(tmp_path_factory) -> dict[str, Path]:
    """``{"cache": HF_DATASETS_CACHE, "saved": a save_to_disk folder}``: ``hf:imdb`` (config
    plain_text; train 40 / test 10; ``label`` a ClassLabel neg/pos) is in the cache."""
    import datasets
    from datasets.data_files import DataFilesDict
    from datasets.packaged_modules.json.json import Json, JsonConfig

    root = tmp_path_factory.mktemp("hf")
    src = root / "src"
    src.mkdir()
    rows = imdb_like().reviews
    for split, n, seed in (("train", 40, 0), ("test", 10, 1)):
        (src / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(n, seed)))
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["neg", "pos"])})
    files = DataFilesDict.from_patterns({"train": ["train.jsonl"], "test": ["test.jsonl"]}, base_path=str(src))

    class Imdb(Json):  # what load_dataset("imdb") builds, from local files
        BUILDER_CONFIGS = [JsonConfig(name="plain_text", data_files=files, features=features)]

    cache = root / "cache"
    Imdb(cache_dir=str(cache), dataset_name="imdb", config_name="plain_text",
         hash="0123abcd").download_and_prepare()
    saved = root / "saved"
    datasets.DatasetDict({
        "train": datasets.Dataset.from_list(rows(12, 2), features=features),
        "validation": datasets.Dataset.from_list(rows(4, 3), features=features),
    }).save_to_disk(str(saved))
    return {"cache": cache, "saved": saved}


def qa_rows(n: int, start: int = 0) -> list[dict[str, str]]:
    return [{"question": f"What is {i} plus 1?", "answer": str(i + 1)} for i in range(start, start + n)]


@pytest.fixture(scope="session")
def saved_datasets(tmp_path_factory) -> dict[str, Path]:
    """Folders ``save_to_disk`` wrote (``datasets`` itself): ``single`` (a ``Dataset``, 30
    question/answer rows), ``dict`` (a ``DatasetDict``: train 30, test 10), ``no_train`` (splits
    validation 6 and test 4), ``test_only`` (a ``Dataset`` loaded as split ``test``, 5 rows),
    ``pairs`` (12 prompt/chosen/rejected rows). Copy one before damaging it."""
    import datasets

    datasets.disable_progress_bars()
    root = tmp_path_factory.mktemp("saved")
    Dataset, DatasetDict = datasets.Dataset, datasets.DatasetDict
    Dataset.from_list(qa_rows(30)).save_to_disk(str(root / "single"))
    DatasetDict({"train": Dataset.from_list(qa_rows(30)),
                 "test": Dataset.from_list(qa_rows(10, 100))}).save_to_disk(str(root / "dict"))
    DatasetDict({"validation": Dataset.from_list(qa_rows(6, 200)),
                 "test": Dataset.from_list(qa_rows(4, 300))}).save_to_disk(str(root / "no_train"))
    Dataset.from_list(qa_rows(5, 400), split=datasets.Split.TEST).save_to_disk(str(root / "test_only"))
    Dataset.from_list([{"prompt": f"Say {i}.", "chosen": str(i), "rejected": f"Well, {i}, I think, maybe."}
                       for i in range(12)]).save_to_disk(str(root / "pairs"))
    return {p.name: p for p in root.iterdir()}


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory) -> Path:
    """A TFDS data dir holding ``imdb_reviews/plain_text/1.0.0`` (train 40 / test 10)."""
    root = tmp_path_factory.mktemp("tfds")
    imdb_like().build(root, train=40, test=10)
    return root


@pytest.fixture
def dataset_env(hf_cache, monkeypatch) -> dict[str, Path]:
    """The HF cache above as this test's ``HF_DATASETS_CACHE`` (TFDS: use ``tfds_dir``)."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(hf_cache["cache"]))
    return hf_cache
