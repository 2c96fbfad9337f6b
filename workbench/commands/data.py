"""``gemma-workbench data check FILE [--input-format F] [--json]``: validate a dataset before training;
``gemma-workbench data list [FOLDER ...] [--json]``: the datasets in the data stores
(``adapters_lib.data.sources.listing``: the HF cache, the TFDS data dir, the data folders), or
the data files under FOLDER.

Prints the validation report (format, counts, tokens, length histogram, truncation, every
dropped record with ``file:line`` and the field), or one JSON object with ``--json``.
Exit status: 0 clean, 1 some records dropped, 2 unusable (nothing to train on, unreadable):
then one ``error:`` line on stderr, with ``--json`` too.
Token counts use ``--tokenizer`` (a SentencePiece ``tokenizer.model``), else the demo tokenizer.
numpy + sentencepiece only: no JAX is imported.
"""

from __future__ import annotations

import argparse
import json
import sys

from workbench.commands._spellings import add_old_spelling

FORMAT_CHOICES = ("auto", "text", "prompt_response", "alpaca", "chat", "qa")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="list the datasets on this machine; check a data file before "
                                    "training", description="Dataset tools.")
    data_sub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    c = data_sub.add_parser(
        "check", help="validate a data file or folder and print its report",
        description="Read FILE (.jsonl .json .csv .parquet .txt, a folder, a folder that datasets' "
                    "save_to_disk wrote: FOLDER[@SPLIT], or a cached dataset: "
                    "hf:NAME[/CONFIG][@SPLIT], tfds:NAME[:VERSION][@SPLIT]), detect its format, "
                    "tokenize it and report counts, lengths, truncation and every dropped record "
                    "with file:line and the field.")
    c.add_argument("file", metavar="FILE",
                   help="data file or folder, a saved dataset FOLDER[@SPLIT], hf:NAME or tfds:NAME")
    c.add_argument("--input-format", dest="format", default="auto", choices=FORMAT_CHOICES,
                   help="the format FILE is read as (default: auto, detected from the records)")
    add_old_spelling(c, "--format", new="--input-format", dest="format", choices=FORMAT_CHOICES)
    c.add_argument("--json", action="store_true", help="print the report as one JSON object")
    c.add_argument("--max-length", type=int, default=512, metavar="N",
                   help="tokens per sequence, as [data] max_length (default: 512, as in eval)")
    c.add_argument("--tokenizer", metavar="PATH",
                   help="a SentencePiece tokenizer.model (default: the demo tokenizer)")
    c.add_argument("--model", metavar="ID",
                   help="preview with that model's tokenizer and chat template (a catalog id or "
                        "path: gemma-workbench models)")
    c.add_argument("--loss-on", default="model", choices=("model", "all"),
                   help="which tokens the loss is on: the model turns of chat records (default) "
                        "or every token")
    c.add_argument("--truncation", default="right", choices=("right", "drop"),
                   help="an example longer than --max-length: cut at the right end (default) or "
                        "dropped")
    c.add_argument("--field", action="append", default=[], metavar="NAME=SOURCE",
                   help="field map, e.g. --field prompt=question (repeatable)")
    c.add_argument("--label", action="append", default=[], metavar="VALUE=TEXT",
                   help="classification: label VALUE answers TEXT, e.g. --label 0=negative (repeatable)")
    c.add_argument("--preview", type=int, default=0, metavar="N", help="also show the first N examples")
    c.set_defaults(handler=run_check)
    ls = data_sub.add_parser(
        "list", help="the datasets in the data stores (HF cache, TFDS data dir, data folders)",
        description="List the datasets in the Hugging Face datasets cache (hf:NAME), the TFDS data "
                    "dir (tfds:NAME) and the data files under FOLDER (default: the data stores' "
                    "folders, <data dir>/data and [data] folders in settings.toml): name, splits, "
                    "rows, bytes, format (an SFT format, preference, prompts or unknown).")
    ls.add_argument("folders", nargs="*", metavar="FOLDER",
                    help="folders to look in for data files, two levels deep (default: the stores)")
    ls.add_argument("--json", action="store_true", help="print one JSON object {datasets: [...]}")
    ls.set_defaults(handler=run_list)


def _field_map(items: list[str], flag: str = "--field",
               example: str = "NAME=SOURCE, e.g. --field prompt=question") -> dict[str, str]:
    from adapters_lib.errors import WorkbenchError

    out = {}
    for item in items:
        if "=" not in item:
            raise WorkbenchError(f"{flag} {item!r} has no '='", where=flag, hint=f"use {flag} {example}")
        k, v = item.split("=", 1)
        if not k.strip() or not v.strip():
            raise WorkbenchError(f"{flag} {item!r} has an empty name", where=flag,
                                 hint=f"use {flag} {example}")
        out[k.strip()] = v.strip()
    return out


def _model_tokenizer(model_id: str) -> str:
    """The tokenizer.model of a catalog entry (its family's template follows from its vocabulary:
    Gemma 4's ``<|turn>``, Gemma 2/3's ``<start_of_turn>``)."""
    from adapters_lib.catalog import ensure_tokenizer, resolve
    from adapters_lib.errors import WorkbenchError

    entry = resolve(model_id)
    path = entry.tokenizer or (ensure_tokenizer(entry) if entry.format == "gguf" else None)
    if not path:
        raise WorkbenchError(f"model {model_id!r} has no tokenizer.model", where="--model",
                             hint="pass --tokenizer PATH, or pick another model (gemma-workbench models)")
    return str(path)


def run_check(args: argparse.Namespace) -> int:
    from adapters_lib.data import check_file
    from adapters_lib.errors import WorkbenchError

    try:
        if args.max_length < 8:
            raise WorkbenchError(f"--max-length is {args.max_length}", where="--max-length",
                                 hint="use at least 8 tokens")
        if args.preview < 0:
            raise WorkbenchError(f"--preview is {args.preview}", where="--preview",
                                 hint="use 0 (none) or a number of examples")
        tokenizer = None
        if getattr(args, "model", None) and not args.tokenizer:
            args.tokenizer = _model_tokenizer(args.model)
        if args.tokenizer:
            from adapters_lib.data.tokenize import TokenCodec

            tokenizer = TokenCodec.from_any(args.tokenizer, where="--tokenizer")
        report = check_file(args.file, format=args.format, tokenizer=tokenizer,
                            max_length=args.max_length, loss_on=args.loss_on,
                            truncation=args.truncation, field_map=_field_map(args.field),
                            labels=_field_map(args.label, "--label", "VALUE=TEXT, e.g. --label 0=negative"))
    except WorkbenchError as err:
        if args.json:
            print(json.dumps({"ok": False, "fatal": str(err), "error": err.to_dict(), "path": args.file}))
        return _unusable(str(err))
    if args.json:
        out = report.to_dict(preview=args.preview)
        print(json.dumps(out, ensure_ascii=False))
    else:
        print(report.render())
        for item in report.preview(args.preview) if args.preview else []:
            print(f"\n--- {item['where']} ({item['tokens']} tokens)\n{item['text']}")
    if report.fatal:
        fatal = report.fatal if report.fatal.startswith(args.file) else f"{args.file}: {report.fatal}"
        return _unusable(f"{fatal}; see the report {'printed as JSON' if args.json else 'above'}")
    return 1 if report.errors else 0


def _unusable(line: str) -> int:
    """Exit 2, with the verdict as one line on stderr: with --json too (stdout then holds the
    JSON alone), so that no unusable input passes in silence where only stderr is read."""
    print(f"error: {line}", file=sys.stderr)
    return 2


def run_list(args: argparse.Namespace) -> int:
    from adapters_lib.data.sources.listing import list_datasets, render, store_folders, stores

    entries = list_datasets(args.folders or store_folders())
    if args.json:
        print(json.dumps({"datasets": entries}, ensure_ascii=False))
        return 0
    print(render(entries))
    if not args.folders:  # where it looked, on stderr: stdout stays the table
        where = "; ".join(f"{what} {path}" for what, path in stores())
        print(f"looked in: {where} (a folder of your own: gemma-workbench data list FOLDER; "
              "more stores: [data] folders in settings.toml)", file=sys.stderr)
    return 0
