"""``gemma-workbench models [--json] [--path DIR …]``: the Gemma weights on this machine.

Lists the demo model, the starter model (Gemma 3 270M GGUF), the kagglehub cache, the
Hugging Face cache, Ollama's and LM Studio's stores, the folders in
``<config dir>/models.toml`` and ``--path`` folders, as a table or (``--json``) one JSON list
of entries (id, family, size, variant, format, path, tokenizer, bytes, params, status,
reason, source, quant, vocab_rows, tokenizer_pieces, tokenizer_mismatch, note). No weights
are read and no JAX is imported.

``gemma-workbench models download HANDLE`` fetches weights (``adapters_lib.download``) and
prints the catalog entry of what arrived.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list the Gemma weights on disk (or download some)",
                       description="List Gemma weights found in the kagglehub cache, the "
                                   "Hugging Face cache, Ollama, LM Studio, the starter "
                                   "package, configured folders and --path folders.")
    p.add_argument("--json", action="store_true", help="print a JSON list of entries")
    p.add_argument("--path", action="append", default=[], metavar="DIR",
                   help="also look in DIR (repeatable)")
    p.set_defaults(handler=run_list)
    models_sub = p.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    d = models_sub.add_parser(
        "download", help="download weights from Kaggle or Hugging Face",
        description="HANDLE: owner/model/framework/variation[/version] (Kaggle) or "
                    "hf:org/name[@revision].")
    d.add_argument("handle", metavar="HANDLE")
    d.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print the entry as JSON")
    d.set_defaults(handler=run_download)


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _human_count(n: int | None) -> str:
    if n is None:
        return "?"
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{unit}" if n < 10 * div else f"{n / div:.1f}{unit}"
    return str(n)


def render_table(entries: list[dict]) -> str:
    """Plain aligned columns; a non-ok entry's reason follows on its own indented line."""
    head = ("ID", "FAMILY", "SIZE", "VARIANT", "FORMAT", "QUANT", "PARAMS", "ON DISK", "STATUS")
    rows = [(e["id"], e["family"], e["size"], e["variant"], e["format"], e.get("quant") or "-",
             _human_count(e["params"]), _human_bytes(e["bytes"]) if e["bytes"] else "-",
             e["status"]) for e in entries]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(head, widths, strict=False)).rstrip()]
    for entry, row in zip(entries, rows, strict=False):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())
        if entry["status"] != "ok":
            lines.append(f"    └ {entry['reason']}")
        elif entry.get("tokenizer_mismatch"):
            lines.append(f"    └ warning: {entry['tokenizer_mismatch']}")
    return "\n".join(lines)


def run_list(args: argparse.Namespace) -> int:
    from adapters_lib.catalog import list_models

    entries = [e.to_dict() for e in list_models(tuple(args.path))]
    if args.json:
        print(json.dumps(entries, indent=2))
    else:
        print(render_table(entries))
        bad = sum(e["status"] != "ok" for e in entries)
        if bad:
            print(f"\n{len(entries)} models, {bad} not usable as they are", file=sys.stderr)
    return 0


def run_download(args: argparse.Namespace) -> int:
    from adapters_lib import download
    from adapters_lib.catalog import inspect_dir

    folder = download.download(args.handle)
    entry = inspect_dir(folder, entry_id=str(download.parse_handle(args.handle)), source="folder")
    out = entry.to_dict() if entry else {"id": args.handle, "path": str(folder), "status": "ok",
                                         "reason": "downloaded; no model layout recognised"}
    print(json.dumps(out, indent=2) if args.json else render_table([out]) if entry else folder)
    return 0
