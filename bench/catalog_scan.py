"""Catalog scan time with 50 entries in the caches: ``python -m bench --only catalog_scan``.

``build_caches(root)`` writes 50 Gemma models over every store the catalog reads, in their
real on-disk layouts and formats, with the tests' own builders (``tests/fixtures_weights.py``,
``tests/fixtures_gguf.py``): a kagglehub cache (orbax checkpoints in both layouts, Keras
presets, a transformers folder, completion markers), a Hugging Face hub cache
(``blobs``/``refs``/``snapshots`` with symlinks; safetensors single and sharded, an older
revision, GGUF quants), an Ollama store (manifests → GGUF blobs), LM Studio folders and a
folder named in ``models.toml``. Beside them, the clutter a real machine has: a dataset repo,
a Llama and a Qwen model, an interrupted download, a vision projector, READMEs.

Each timed scan is a fresh ``gemma-workbench models --json`` process pointed at them by the
variables a user's machine sets (``KAGGLEHUB_CACHE``, ``HF_HOME``, ``OLLAMA_MODELS``,
``LMSTUDIO_MODELS``, ``GEMMA_WORKBENCH_HOME`` → ``config/models.toml``): cold (a new data dir,
no GGUF header cache) and warm (the header cache filled by an earlier scan). The reference is
``huggingface_hub.scan_cache_dir()`` in a fresh process over the same HF cache: what a user
runs to list that one store. Each scan's listing is checked: exactly the 50 ids, all ``ok``
and Gemma, and none of the clutter as a usable Gemma.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.measures import measure
from bench.report import Row, median_alternating, timed

ROOT = Path(__file__).resolve().parent.parent
EXE = ROOT / ".venv" / "bin" / "gemma-workbench"
GEMMA = ("gemma2", "gemma3")


@dataclass
class Caches:
    root: Path
    env: dict[str, str]
    """The store variables that point the catalog (and huggingface_hub) at them."""
    folders: list[Path]
    """Folders for ``models.toml``."""
    expected: set[str] = field(default_factory=set)
    """Catalog ids of the Gemma models: each must be listed ``ok``."""
    clutter: set[str] = field(default_factory=set)
    """Catalog ids of what must not be listed as a usable Gemma (if listed at all)."""
    hf_repos: int = 0
    """Repos in the HF cache (models and datasets): what ``scan_cache_dir`` must count."""


def _builders():
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import fixtures_gguf
    import fixtures_weights

    return fixtures_weights, fixtures_gguf


def build_caches(root: Path, tokenizer: Path) -> Caches:
    """50 Gemma models and some clutter under ``root`` (a few MB in all)."""
    fw, fg = _builders()
    from adapters_lib.models import families

    g3 = families.Arch("gemma3", 2, 64, 128, 4, 16, 1, 1024, ("local", "global"), 16,
                       use_qk_norm=True, transpose_gating=True, query_pre_attn_scalar=16,
                       local_rope=10_000, global_rope=1_000_000)
    g2 = fw.TINY_GEMMA2
    p3, p2 = fw.tiny_params(g3, seed=11), fw.tiny_params(g2, seed=12)
    kaggle, hf_home, ollama, lms = root / "kagglehub", root / "hf-home", root / "ollama", root / "lmstudio"
    hub = hf_home / "hub"
    mine = root / "home-models"
    c = Caches(root=root, env={"KAGGLEHUB_CACHE": str(kaggle), "HF_HOME": str(hf_home),
                               "OLLAMA_MODELS": str(ollama), "LMSTUDIO_MODELS": str(lms)},
               folders=[mine])
    scratch = root / "scratch"
    scratch.mkdir(parents=True)

    def gguf(name: str, params: dict, arch, default: str, **kw: Any) -> bytes:
        path = fg.write_gguf(scratch / f"{len(list(scratch.iterdir()))}.gguf", params, arch,
                             tokenizer=tokenizer, default=default, name=name, **kw)
        return path.read_bytes()

    # ---- kagglehub: 8 orbax (both layouts), 2 Keras presets, 1 transformers = 11
    # orbax holds no config: the catalog knows a checkpoint by its shapes (the demo's, 16 MB)
    demo = fw.tiny_params(fw.DEMO_ARCH, seed=13)
    flat = fw.write_orbax(scratch / "ckpt-flat", demo, "flat")
    nested = fw.write_orbax(scratch / "ckpt-nested", demo, "nested")
    for i, (variation, version) in enumerate([("gemma3-270m-it", 1), ("gemma3-270m-it", 2),
                                              ("gemma3-270m", 1), ("gemma3-1b-it", 1),
                                              ("gemma3-1b-it", 3), ("gemma3-1b", 1),
                                              ("gemma3-4b-it", 1), ("gemma3-4b", 2)]):
        handle = f"google/gemma-3/flax/{variation}/{version}"
        folder = fw.kaggle_model(kaggle, handle, None, tokenizer)
        shutil.copytree(flat if i % 2 else nested, folder / variation)
        c.expected.add(f"kaggle:{handle}")
    for handle in ("keras/gemma3/keras/gemma3_instruct_270m/1", "keras/gemma3/keras/gemma3_1b/2"):
        fw.keras_preset(fw.kaggle_model(kaggle, handle, None, None), tokenizer)
        c.expected.add(f"kaggle:{handle}")
    handle = "google/gemma-3/transformers/gemma-3-270m-it/1"
    folder = fw.kaggle_model(kaggle, handle, None, None)
    for name, data in fw.hf_files(p3, g3, tokenizer=tokenizer).items():
        (folder / name).write_bytes(data)
    c.expected.add(f"kaggle:{handle}")
    fw.kaggle_model(kaggle, "google/gemma-3/flax/gemma3-12b-it/1", None, tokenizer, complete=False)
    c.clutter.add("kaggle:google/gemma-3/flax/gemma3-12b-it/1")  # a download cut short

    # ---- Hugging Face: 8 safetensors repos + 1 older revision + 4 GGUF repos × 3 = 21
    single3, single2 = fw.hf_files(p3, g3, tokenizer=tokenizer), fw.hf_files(p2, g2, tokenizer=tokenizer)
    sharded = fw.hf_files(p3, g3, tokenizer=tokenizer, shard_bytes=150_000)
    repos = [("google/gemma-3-270m", single3), ("google/gemma-3-270m-it", single3),
             ("google/gemma-3-1b-it", sharded), ("google/gemma-3-1b-pt", sharded),
             ("google/gemma-2-2b", single2), ("google/gemma-2-2b-it", single2),
             ("unsloth/gemma-3-270m-it", single3), ("someone/gemma-3-270m-medical", sharded)]
    old = "0123abcd" + "0" * 32
    fw.hf_cache_repo(hub, "google/gemma-3-270m-it", single3, commit=old)
    c.expected.add(f"hf:google/gemma-3-270m-it@{old[:8]}")
    for repo, files in repos:
        readme = {"README.md": f"# {repo}\n".encode(), ".gitattributes": b"*.safetensors filter=lfs\n"}
        fw.hf_cache_repo(hub, repo, {**files, **readme})
        c.expected.add(f"hf:{repo}")
    for repo, arch, params in (("bartowski/gemma-3-270m-it-GGUF", g3, p3),
                               ("unsloth/gemma-3-1b-it-GGUF", g3, p3),
                               ("ggml-org/gemma-3-270m-GGUF", g3, p3),
                               ("bartowski/gemma-2-2b-it-GGUF", g2, p2)):
        base = repo.split("/")[1].removesuffix("-GGUF")
        files = {f"{base}-{q}.gguf": gguf(f"{base} {q}", params, arch, q)
                 for q in ("Q8_0", "F16", "F32")}
        fw.hf_cache_repo(hub, repo, {**files, "README.md": b"# quants\n"})
        c.expected |= {f"hf:{repo}/{name}" for name in files}
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
             "vocab_size": 1024}
    fw.hf_cache_repo(hub, "meta-llama/Llama-3.2-1B", {"config.json": json.dumps(llama).encode(),
                                                      "model.safetensors": b"\x08" + b"\0" * 7 + b"{}      "})
    c.clutter.add("hf:meta-llama/Llama-3.2-1B")
    qwen = _llama_gguf(fg, scratch / "qwen.gguf", tokenizer, "Qwen2.5 0.5B Instruct")
    fw.hf_cache_repo(hub, "Qwen/Qwen2.5-0.5B-Instruct-GGUF", {"qwen2.5-0.5b-instruct-q8_0.gguf": qwen})
    c.clutter.add("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf")
    data_repo = hub / "datasets--openai--gsm8k"
    fw.hf_cache_repo(hub, "openai/gsm8k", {"train.jsonl": b"{}\n"})
    (hub / "models--openai--gsm8k").rename(data_repo)  # a dataset repo: not a model
    c.hf_repos = len(repos) + 4 + 3

    # ---- Ollama: 8 manifests → GGUF blobs (library and hf.co names)
    for model, tag, arch, params, q, host, ns in (
            ("gemma3", "270m", g3, p3, "Q8_0", "registry.ollama.ai", "library"),
            ("gemma3", "1b", g3, p3, "F16", "registry.ollama.ai", "library"),
            ("gemma3", "4b-it-q8_0", g3, p3, "Q8_0", "registry.ollama.ai", "library"),
            ("gemma2", "2b", g2, p2, "Q8_0", "registry.ollama.ai", "library"),
            ("gemma2", "2b-instruct-fp16", g2, p2, "F16", "registry.ollama.ai", "library"),
            ("gemma3-tuned", "latest", g3, p3, "F32", "registry.ollama.ai", "someone"),
            ("gemma-3-270m-it-GGUF", "Q8_0", g3, p3, "Q8_0", "hf.co", "unsloth"),
            ("gemma-3-1b-it-GGUF", "F16", g3, p3, "F16", "hf.co", "bartowski")):
        fg.ollama_store(ollama, model, tag, gguf(f"{model} {tag}", params, arch, q), host=host,
                        namespace=ns)
        name = f"{model}:{tag}" if ns == "library" else \
            f"{ns}/{model}:{tag}" if host == "registry.ollama.ai" else f"{host}/{ns}/{model}:{tag}"
        c.expected.add(f"ollama:{name}")
    fg.ollama_store(ollama, "llama3.2", "1b", _llama_gguf(fg, scratch / "l.gguf", tokenizer, "Llama 3.2 1B"))
    c.clutter.add("ollama:llama3.2:1b")

    # ---- LM Studio: 7 GGUF files in 4 repos, a vision projector and READMEs beside them
    for rel, arch, params, q in (("lmstudio-community/gemma-3-270m-it-GGUF/gemma-3-270m-it-Q8_0.gguf", g3, p3, "Q8_0"),
                                 ("lmstudio-community/gemma-3-270m-it-GGUF/gemma-3-270m-it-F16.gguf", g3, p3, "F16"),
                                 ("lmstudio-community/gemma-3-1b-it-GGUF/gemma-3-1b-it-Q8_0.gguf", g3, p3, "Q8_0"),
                                 ("lmstudio-community/gemma-3-1b-it-GGUF/gemma-3-1b-it-F32.gguf", g3, p3, "F32"),
                                 ("bartowski/gemma-2-2b-it-GGUF/gemma-2-2b-it-Q8_0.gguf", g2, p2, "Q8_0"),
                                 ("bartowski/gemma-2-2b-it-GGUF/gemma-2-2b-it-F16.gguf", g2, p2, "F16"),
                                 ("someone/gemma-3-270m-chat-GGUF/gemma-3-270m-chat-Q8_0.gguf", g3, p3, "Q8_0")):
        target = lms / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gguf(target.stem, params, arch, q))
        (target.parent / "README.md").write_text("# model card\n")
        c.expected.add(f"lmstudio:{rel}")
    proj = lms / "lmstudio-community" / "gemma-3-1b-it-GGUF" / "mmproj-model-f16.gguf"
    proj.write_bytes(_llama_gguf(fg, scratch / "p.gguf", tokenizer, "projector"))
    c.clutter.add(f"lmstudio:{proj.relative_to(lms).as_posix()}")

    # ---- a folder of one's own (models.toml): a checkpoint, a GGUF, an export; notes, data
    ckpt = mine / "gemma3-270m-lora-step1000"
    shutil.copytree(nested, ckpt / "checkpoint")
    shutil.copy(tokenizer, ckpt / "tokenizer.model")
    gfile = mine / "gemma-3-270m-it-Q8_0.gguf"
    gfile.write_bytes(gguf("gemma 3 270m it", p3, g3, "Q8_0"))
    export = mine / "exports" / "gemma3-270m-merged"
    export.mkdir(parents=True)
    for name, data in single3.items():
        (export / name).write_bytes(data)
    c.expected |= {f"local:{p.resolve()}" for p in (ckpt, gfile, export)}
    (mine / "notes.txt").write_text("lr 2e-4 was best\n")
    (mine / "data").mkdir()
    (mine / "data" / "train.jsonl").write_text('{"text": "hi"}\n')
    shutil.rmtree(scratch)
    return c


def _llama_gguf(fg, path: Path, tokenizer: Path, name: str) -> bytes:
    """A small Llama GGUF (not a Gemma): the clutter of a real cache."""
    import numpy as np

    from adapters_lib.models import families

    arch = families.Arch("gemma3", 2, 64, 128, 4, 16, 4, 1024, ("local", "global"), 16,
                         use_qk_norm=False, transpose_gating=True, query_pre_attn_scalar=16)
    fg.write_gguf(path, None, arch, tokenizer=tokenizer, architecture="llama", name=name,
                  tensors={"token_embd.weight": np.zeros((1024, 64), np.float32),
                           "output_norm.weight": np.ones(64, np.float32)})
    return path.read_bytes()


def new_home(c: Caches, name: str) -> Path:
    """A fresh workbench home whose ``config/models.toml`` names ``c.folders``."""
    home = c.root / "homes" / name
    (home / "config").mkdir(parents=True)
    (home / "config" / "models.toml").write_text(
        "folders = [" + ", ".join(json.dumps(str(f)) for f in c.folders) + "]\n")
    return home


def _env(c: Caches, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")}
    env.update(c.env, GEMMA_WORKBENCH_HOME=str(home), HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p))
    return env


def scan(c: Caches, home: Path) -> list[dict]:
    """One ``gemma-workbench models --json`` process: its entries."""
    out = subprocess.run([str(EXE), "models", "--json"], env=_env(c, home), capture_output=True,
                         text=True, timeout=600, cwd=c.root)
    if out.returncode != 0:
        raise RuntimeError(f"gemma-workbench models failed ({out.returncode}): {out.stderr[-800:]}")
    return json.loads(out.stdout)


def hf_reference(c: Caches) -> int:
    """``huggingface_hub.scan_cache_dir()`` in a fresh process (it reads ``HF_HOME``): repos."""
    code = "from huggingface_hub import scan_cache_dir; print(len(scan_cache_dir().repos))"
    out = subprocess.run([sys.executable, "-c", code], env=_env(c, c.root), capture_output=True,
                         text=True, timeout=300, check=True)
    return int(out.stdout.strip())


def check_listing(c: Caches, entries: list[dict]) -> str:
    """Empty when the listing holds exactly the 50 Gemma models, each ok, and no clutter
    as a usable Gemma; else what is wrong, in words."""
    stores = [e for e in entries if e.get("source") not in ("builtin", "starter")]
    usable = {e["id"] for e in stores if e.get("status") == "ok" and e.get("family") in GEMMA}
    listed = {e["id"]: e for e in stores}
    problems = []
    missing = sorted(c.expected - usable)
    if missing:
        problems.append(f"{len(missing)} of {len(c.expected)} not found ok: " + "; ".join(
            f"{i} ({listed[i]['status']}: {listed[i]['reason']})" if i in listed else f"{i} (not listed)"
            for i in missing[:4]) + (" …" if len(missing) > 4 else ""))
    extra = sorted(usable - c.expected)
    if extra:
        problems.append("listed as usable Gemma but not one of the 50: " + ", ".join(extra[:4]))
    return "; ".join(problems)


@measure("catalog_scan")
def catalog_scan(quick: bool = False) -> list[Row]:
    """`gemma-workbench models --json` over 50 entries in every store, cold and warm."""
    import tempfile

    reps = 3 if quick else 5
    with tempfile.TemporaryDirectory(prefix="wb-catalog-bench-") as tmp:
        root = Path(tmp)
        from adapters_lib.models import demo

        tokenizer = demo.ensure_demo_tokenizer(root / "tokenizer")
        c = build_caches(root / "caches", tokenizer)
        assert len(c.expected) == 50, len(c.expected)
        warm_home = new_home(c, "warm")
        problems = [check_listing(c, scan(c, warm_home))]  # fills the warm home's header cache
        if hf_reference(c) != c.hf_repos:
            problems.append(f"scan_cache_dir found not {c.hf_repos} repos")
        runs = iter(range(10_000))
        listings: list[list[dict]] = []

        def cold() -> float:
            home = new_home(c, f"cold-{next(runs)}")
            return timed(lambda: listings.append(scan(c, home)))

        def warm() -> float:
            return timed(lambda: listings.append(scan(c, warm_home)))

        # the same process over no stores (start-up, imports, demo, the starter's cached header)
        bare = Caches(root=c.root, env={k: str(c.root / "none") for k in c.env}, folders=[])
        bare_home = new_home(bare, "empty")

        def empty() -> float:
            return timed(lambda: scan(bare, bare_home))

        empty()  # fills that home's header cache with the starter's header (not timed)
        med = median_alternating({"cold": cold, "warm": warm, "empty": empty,
                                  "ref": lambda: timed(lambda: hf_reference(c))}, reps)
        problems += [check_listing(c, entries) for entries in listings]
        cache_file = warm_home / "data" / "catalog" / "gguf-headers.json"
        cached = len(json.loads(cache_file.read_text())["headers"]) if cache_file.is_file() else 0
    wrong = next((p for p in problems if p), "")
    verdict = f"SCAN WRONG: {wrong}" if wrong else \
        "all 50 found ok, no clutter as Gemma (checked in every scan)"
    ref_name = "huggingface_hub.scan_cache_dir, HF cache only"
    rows = []
    for label, what in (("cold", "a new data dir: no GGUF header cache yet (the OS page cache is warm)"),
                        ("warm", f"the GGUF header cache filled by an earlier scan ({cached} headers)")):
        rows.append(Row(measure=f"catalog scan, 50 entries, {label}", ours=med[label],
                        reference=med["ref"], unit="s", ratio=med[label] / med["ref"],
                        target="", met=False if wrong else None, ref_name=ref_name,
                        note=f"reported (no target); a fresh `gemma-workbench models --json` process, "
                             f"{what}; the same process over no stores: {med['empty']:.2f} s; "
                             f"median of {reps}; 50 models in 5 stores + clutter (bench/catalog_scan.py): "
                             f"{verdict}"))
    return rows
