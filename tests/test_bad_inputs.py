"""The bad-input sweep: what a tired user types gets one line, exit 2, never a traceback.

Each row is a real mistake: a config file (wrong types, unknown keys, bad TOML, binary,
non-UTF-8, folders where files belong, huge or non-finite numbers, control characters), a
data file (empty, truncated, wrong fields, non-UTF-8, nested too deeply, a folder without
data), a command line (missing, invalid or contradictory flags, negative steps, unknown
runs), or the environment (``GEMMA_WORKBENCH_*``). Every row asserts: the exit status, one
line on stderr that starts with ``error:`` and names the place (file:line, key, flag), and
no ``Traceback``. Nothing the user made is touched: the input files are checked unchanged.

Most rows call ``workbench.cli.main`` in this process (cheap); a few run the real
``gemma-workbench`` executable. Rows that need the engine share one (``--no-warm``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from adapters_lib import runs
from adapters_lib.config import load_config
from adapters_lib.runs.state import can_move
from workbench.cli import main

REPO = Path(__file__).resolve().parent.parent
EXE = REPO / ".venv" / "bin" / "gemma-workbench"

GOOD_JSONL = b'{"prompt": "2+2?", "response": "4"}\n{"prompt": "3+3?", "response": "6"}\n'

FILES: dict[str, bytes] = {
    # configs
    "binary.toml": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    "latin1.toml": "[run]\nname = \"café\"\n".encode("latin-1"),
    "unclosed.toml": b'[train]\nsteps = "3\n',
    "dupkey.toml": b"[train]\nsteps = 3\nsteps = 4\n",
    "dupsection.toml": b"[train]\nsteps = 3\n[train]\nseed = 4\n",
    "scalar_section.toml": b"train = 3\n",
    "outside.toml": b"steps = 3\n",
    "array_tables.toml": b"[[train]]\nsteps = 3\n",
    "date.toml": b"[train]\nsteps = 1979-05-27\n",
    "bigint.toml": b"[train]\nsteps = 99999999999999999999\n",
    "subtable.toml": b"[train.extra]\nx = 1\n",
    "fieldmap_int.toml": b"[data]\nfield_map = {prompt = 3}\n",
    "targets_int.toml": b"[lora]\ntargets = 5\n",
    "nul_name.toml": b'[run]\nname = "a\\u0000b"\n',
    "deep.toml": b"[data]\nfield_map = " + b"{a=" * 3000 + b'"x"' + b"}" * 3000 + b"\n",
    "unknown_key.toml": b"[train]\nsteps = 10\nlearnig_rate = 1e-3\n",
    "unknown_section.toml": b"[trian]\nsteps = 10\n",
    "steps_string.toml": b'[train]\nsteps = "ten"\n',
    "lr_nan.toml": b"[train]\nlearning_rate = nan\n",
    "alpha_inf.toml": b"[lora]\nalpha = inf\n",
    "clip_nan.toml": b"[train]\nclip_norm = nan\n",
    "seed_neg.toml": b"[train]\nseed = -1\n",
    "source_space.toml": b'[model]\nsource = " demo"\n',
    "source_empty.toml": b'[model]\nsource = ""\n',
    "backend.toml": b'[model]\nbackend = "pytorch"\n',
    "mesh_zero.toml": b"[mesh]\ntensor = 0\n",
    "mesh_two_fill.toml": b"[mesh]\ndata = -1\ntensor = -1\n",
    "schedule.toml": b'[train]\nschedule = "cosin"\n',
    "max_length.toml": b"[data]\nmax_length = 4\n",
    "eval_fraction.toml": b"[data]\neval_fraction = 1.0\n",
    "exact_match.toml": b"[train]\neval_exact_match = -7\n",
    "bool_int.toml": b"[lora]\nenabled = 1\n",
    "int_bool.toml": b"[lora]\nrank = true\n",
    "float_steps.toml": b"[train]\nsteps = 10.0\n",
    "unicode_key.toml": "[train]\nstéps = 3\n".encode(),
    "emoji_target.toml": "[lora]\ntargets = [\"q\", \"🙂\"]\n".encode(),
    "tab_path.toml": b'[data]\npath = "a\\tb.jsonl"\n',
    "keras_remat.toml": b'[model]\nbackend = "keras"\n[train]\nremat = true\n',
    "twice_target.toml": b'[lora]\ntargets = ["q", "q"]\n',
    # data
    "data/good.jsonl": GOOD_JSONL,
    "data/empty.jsonl": b"",
    "data/blank.jsonl": b"\n\n   \n",
    "data/truncated.jsonl": b'{"text": "a"}\n{"text": "b"\n',
    "data/all_bad.jsonl": b'{"text": \n{"text"\n',
    "data/wrong_fields.jsonl": b'{"foo": 1}\n{"bar": 2}\n',
    "data/latin1.jsonl": '{"text": "café"}\n'.encode("latin-1"),
    "data/deep.jsonl": b"[" * 100000 + b"\n",
    "data/bignum.jsonl": b'{"text": "a", "n": ' + b"9" * 5000 + b"}\n",
    "data/object.json": b'{"records": [{"text": "a"}]}\n',
    "data/truncated.json": b'[{"text": "a"}, {"text": ',
    "data/deep.json": b"[" + b"[" * 100000,
    "data/ragged.csv": b"prompt,response\nq\n",
    "data/header_only.csv": b"prompt,response\n",
    "data/garbage.parquet": b"PAR1" + b"\x00" * 64,
    "data/notes.xml": b"<notes/>",
    "data/messages_str.jsonl": b'{"messages": "hi"}\n',
    "data/robot.jsonl": b'{"messages": [{"role": "robot", "content": "x"}]}\n',
    "data/list.jsonl": b'[1, 2]\n"text"\n',
    "data/binary.txt": b"\x7fELF\x02\x01\x01\x00\x00\x00",
    "data/binary.csv": b"prompt,response\n\x00\x01,\x02\n",
    "run_dir_file.toml": b'[run]\ndir = "cfg.toml"\n',
    "nodata/readme.md": b"# not data\n",
    "tok/bad.model": b"this is not a sentencepiece model\n",
}

CONFIG_ROWS = [  # (id, file, needle: the place and the cause)
    ("binary", "binary.toml", "binary.toml: config is a binary file"),
    ("latin1", "latin1.toml", "latin1.toml:2: config is not UTF-8"),
    ("unclosed string", "unclosed.toml", "unclosed.toml:2: invalid TOML"),
    ("duplicate key", "dupkey.toml", "dupkey.toml:3: invalid TOML"),
    ("duplicate section", "dupsection.toml", "dupsection.toml:3: invalid TOML"),
    ("section is a scalar", "scalar_section.toml", "scalar_section.toml:1 [train]: [train] must be a table"),
    ("key outside sections", "outside.toml", "outside.toml:1 [steps]: key 'steps' is outside any section"),
    ("array of tables", "array_tables.toml", "array_tables.toml:1 [train]: [train] must be a table"),
    ("date for an int", "date.toml", "date.toml:2 [train] steps: train.steps must be an integer"),
    ("int over 64 bits", "bigint.toml", "bigint.toml:2 [train] steps: train.steps must be an integer"),
    ("unknown sub-table", "subtable.toml", "subtable.toml:1 [train] extra: unknown key train.extra"),
    ("field_map value not text", "fieldmap_int.toml", "fieldmap_int.toml:2 [data] field_map"),
    ("targets not a list", "targets_int.toml", "targets_int.toml:2 [lora] targets: lora.targets must be"),
    ("NUL in a name", "nul_name.toml", "nul_name.toml:2 [run] name: run.name holds a control character"),
    ("nested too deeply", "deep.toml", "deep.toml: invalid TOML: nested too deeply"),
    ("misspelt key", "unknown_key.toml", "unknown_key.toml:3 [train] learnig_rate: unknown key"),
    ("misspelt section", "unknown_section.toml", "unknown_section.toml:1 [trian]: unknown section [trian]"),
    ("string for an int", "steps_string.toml", "steps_string.toml:2 [train] steps: train.steps must be an integer"),
    ("nan learning rate", "lr_nan.toml", "lr_nan.toml:2 [train] learning_rate: train.learning_rate is nan"),
    ("inf alpha", "alpha_inf.toml", "alpha_inf.toml:2 [lora] alpha: lora.alpha is inf"),
    ("nan clip_norm", "clip_nan.toml", "clip_nan.toml:2 [train] clip_norm: train.clip_norm is nan"),
    ("negative seed", "seed_neg.toml", "seed_neg.toml:2 [train] seed: train.seed is -1"),
    ("source with a space", "source_space.toml", "source_space.toml:2 [model] source: model.source ' demo'"),
    ("empty source", "source_empty.toml", "source_empty.toml:2 [model] source: model.source is empty"),
    ("unknown backend", "backend.toml", "backend.toml:2 [model] backend: model.backend is 'pytorch'"),
    ("zero mesh axis", "mesh_zero.toml", "mesh_zero.toml:2 [mesh] tensor: mesh.tensor is 0"),
    ("two filling axes", "mesh_two_fill.toml", "mesh_two_fill.toml:1 [mesh]: more than one mesh axis is -1"),
    ("misspelt schedule", "schedule.toml", "schedule.toml:2 [train] schedule: train.schedule is 'cosin'"),
    ("tiny max_length", "max_length.toml", "max_length.toml:2 [data] max_length: data.max_length is 4"),
    ("eval_fraction 1", "eval_fraction.toml", "eval_fraction.toml:2 [data] eval_fraction"),
    ("eval_exact_match -7", "exact_match.toml", "exact_match.toml:2 [train] eval_exact_match"),
    ("1 for a bool", "bool_int.toml", "bool_int.toml:2 [lora] enabled: lora.enabled must be true or false"),
    ("bool for an int", "int_bool.toml", "int_bool.toml:2 [lora] rank: lora.rank must be an integer"),
    ("10.0 for an int", "float_steps.toml", "float_steps.toml:2 [train] steps: train.steps must be an integer"),
    ("non-ASCII bare key", "unicode_key.toml", "unicode_key.toml:2: invalid TOML"),
    ("emoji target", "emoji_target.toml", "emoji_target.toml:2 [lora] targets: unknown LoRA target '🙂'"),
    ("tab in a path", "tab_path.toml", "tab_path.toml:2 [data] path: data.path holds a control character"),
    ("gemma-only option on keras", "keras_remat.toml", "[train] remat: train.remat is gemma-only"),
    ("target twice", "twice_target.toml", "twice_target.toml:2 [lora] targets: lora.targets names a target twice"),
    ("run dir is a file", "run_dir_file.toml", "run_dir_file.toml:2 [run] dir: run.dir"),
    ("missing file", "missing.toml", "missing.toml: config file 'missing.toml' not found"),
    ("a folder", "data", "data: 'data' is a folder, not a config file"),
    ("not a regular file", "/dev/null", "/dev/null: config file '/dev/null' not a regular file"),
]

SET_ROWS = [  # (id, --set item, needle)
    ("no equals", "train.steps", "--set: --set 'train.steps' has no '='"),
    ("three parts", "a.b.c=1", "--set: --set 'a.b.c' is not section.key"),
    ("empty section", ".steps=3", "--set: --set '.steps' is not section.key"),
    ("empty key", "train.=3", "--set: --set 'train.' is not section.key"),
    ("empty value", "train.steps=", "--set train.steps: train.steps must be an integer, got ''"),
    ("negative steps", "train.steps=-5", "--set train.steps: train.steps is -5"),
    ("steps over 32 bits", "train.steps=3000000000", "--set train.steps: train.steps is 3000000000"),
    ("nan", "train.learning_rate=nan", "--set train.learning_rate: train.learning_rate is nan"),
    ("-inf weight decay", "train.weight_decay=-inf", "--set train.weight_decay: train.weight_decay is -inf"),
    ("seed 2^32", "train.seed=4294967296", "--set train.seed: train.seed is 4294967296"),
    ("no such user", "data.path=~nosuchuser1/x.jsonl", "--set data.path: data.path '~nosuchuser1/x.jsonl': cannot expand"),
    ("unknown key", "lora.rnak=4", "--set lora.rnak: unknown key lora.rnak; did you mean 'rank'?"),
    ("unknown section", "trian.steps=4", "--set trian: unknown section [trian]"),
    ("half a list", "lora.targets=[", "--set lora.targets: unknown LoRA target '['"),
    ("control character", 'run.name="x\\u001by"', "--set run.name: run.name holds a control character"),
]

DATA_ROWS = [  # (id, argv after `data check`, exit status, needle)
    ("missing file", ["data/nope.jsonl"], 2, "[data] path: data path 'data/nope.jsonl' not found"),
    ("empty file", ["data/empty.jsonl"], 2, "error: data/empty.jsonl is empty: no records"),
    ("blank lines only", ["data/blank.jsonl"], 2, "data/blank.jsonl"),
    ("all lines broken", ["data/all_bad.jsonl"], 2, "data/all_bad.jsonl: all 2 records were dropped"),
    ("wrong fields", ["data/wrong_fields.jsonl"], 2, "data/wrong_fields.jsonl: all 2 records were dropped"),
    ("not UTF-8", ["data/latin1.jsonl"], 2, "data/latin1.jsonl: all 1 records were dropped"),
    ("nested too deeply", ["data/deep.jsonl"], 2, "data/deep.jsonl: all 1 records were dropped"),
    ("5000-digit number", ["data/bignum.jsonl"], 2, "data/bignum.jsonl: all 1 records were dropped"),
    ("JSON object file", ["data/object.json"], 2, "data/object.json: all 1 records were dropped"),
    ("truncated JSON list", ["data/truncated.json"], 1, None),
    ("JSON list nested deeply", ["data/deep.json"], 2, "data/deep.json: all 1 records were dropped"),
    ("ragged CSV", ["data/ragged.csv"], 2, "data/ragged.csv: all 1 records were dropped"),
    ("CSV header only", ["data/header_only.csv"], 2, "data/header_only.csv"),
    ("garbage parquet", ["data/garbage.parquet"], 2, "data/garbage.parquet: not a readable parquet file"),
    ("binary .txt", ["data/binary.txt"], 2, "data/binary.txt"),
    ("binary .csv", ["data/binary.csv"], 2, "data/binary.csv"),
    ("unknown type", ["data/notes.xml"], 2, "notes.xml: unknown data file type '.xml'"),
    ("messages not a list", ["data/messages_str.jsonl"], 2, "data/messages_str.jsonl: all 1 records"),
    ("unknown role", ["data/robot.jsonl"], 2, "data/robot.jsonl: all 1 records"),
    ("lines not objects", ["data/list.jsonl"], 2, "data/list.jsonl: all 2 records"),
    ("folder without data", ["nodata"], 2, "[data] path: folder 'nodata' holds no data files"),
    ("a device", ["/dev/null"], 2, "/dev/null: null: unknown data file type"),
    ("tokenizer missing", ["data/good.jsonl", "--tokenizer", "tok/nope.model"], 2,
     "--tokenizer: tokenizer 'tok/nope.model' not found"),
    ("tokenizer is a folder", ["data/good.jsonl", "--tokenizer", "tok"], 2,
     "--tokenizer: tokenizer 'tok' is a folder; did you mean 'tok/bad.model'?"),
    ("tokenizer not sentencepiece", ["data/good.jsonl", "--tokenizer", "tok/bad.model"], 2,
     "--tokenizer: bad.model is not a SentencePiece model"),
    ("max-length too small", ["data/good.jsonl", "--max-length", "4"], 2, "--max-length: --max-length is 4"),
    ("max-length not a number", ["data/good.jsonl", "--max-length", "lots"], 2,
     "data check: argument --max-length: invalid int value: 'lots'"),
    ("field without =", ["data/good.jsonl", "--field", "prompt"], 2, "--field: --field 'prompt' has no '='"),
    ("field with empty name", ["data/good.jsonl", "--field", "=q"], 2, "--field: --field '=q' has an empty name"),
    ("unknown format", ["data/good.jsonl", "--input-format", "xml"], 2, "argument --input-format: invalid choice: 'xml'"),
    ("negative preview", ["data/good.jsonl", "--preview", "-3"], 2, "--preview: --preview is -3"),
]

CLI_ROWS = [  # (id, argv, needle) — exit 2 each
    ("unknown command", ["trian"], "gemma-workbench: argument COMMAND: invalid choice: 'trian'"),
    ("unknown flag", ["doctor", "--bogus"],
     "gemma-workbench doctor: unrecognized arguments: --bogus; see `gemma-workbench doctor --help`"),
    ("unknown flag of an action", ["runs", "show", "x", "--merged"],
     "runs show: unrecognized arguments: --merged; see `gemma-workbench runs show --help`"),
    ("export without a run", ["export", "--format", "gguf"], "export: no run given"),
    ("export, two runs", ["export", "a", "--run", "b"], "two runs given: a and --run b"),
    ("data without a sub-command", ["data"], "gemma-workbench data: the following arguments are required"),
    ("engine without an action", ["engine"], "gemma-workbench engine: the following arguments are required"),
    ("data check without a file", ["data", "check"], "data check: the following arguments are required: FILE"),
    ("runs show without an id", ["runs", "show"], "runs show: no run given"),
    ("runs delete without an id", ["runs", "delete"], "runs delete: no run given"),
    ("runs show, two runs", ["runs", "show", "a", "--run", "b"], "runs show: two runs given: a and --run b"),
    ("runs attach negative since", ["runs", "attach", "x", "--since", "-5"],
     "argument --since: -5 is negative"),
    ("runs attach since not a number", ["runs", "attach", "x", "--since", "five"],
     "argument --since: 'five' is not a step number"),
    ("resume and detach", ["train", "--resume", "x", "--detach"],
     "argument --detach: not allowed with argument --resume"),
    ("resume with a config", ["train", "cfg.toml", "--resume", "x"],
     "train --resume: --resume takes no CONFIG"),
    ("resume an unknown run", ["train", "--in-process", "--resume", "no-such-run"], "no run 'no-such-run'"),
    ("multihost flags alone", ["engine", "start", "--coordinator", "h:1"],
     "engine start: --coordinator, --num-processes and --process-id need --multihost"),
    ("run dir cannot be made", ["train", "--in-process", "-q", "--set", "mesh.devices=1", "--set", "run.dir=/proc/gw-no/runs"],
     "/proc/gw-no"),
    ("models in a missing folder", ["models", "--path", "does/not/exist"], "--path"),
    ("runs delete, no terminal, no --yes", ["runs", "delete", "x"],
     "runs delete: not deleting run 'x' without asking"),
    ("export step not a number", ["export", "x", "--step", "last"], "argument --step: 'last' is not a step number or 'best'"),
    ("export unknown format", ["export", "x", "--format", "pickle"], "argument --format: invalid choice"),
    ("export an unknown run", ["export", "--in-process", "no-such-run", "--format", "adapter"], "no run 'no-such-run'"),
    ("sample without a prompt", ["sample", "--model", "demo"], "the following arguments are required: --prompt"),
    ("compare without prompts", ["compare", "--run", "x"], "compare"),
    ("compare with both prompt kinds", ["compare", "--run", "x", "--prompt", "a", "--prompts", "b"],
     "not allowed with argument"),
]

ENV_ROWS = [  # (id, variables, needle)
    ("idle exit not a number", {"GEMMA_WORKBENCH_ENGINE_IDLE_EXIT": "soon"},
     "GEMMA_WORKBENCH_ENGINE_IDLE_EXIT: 'soon' is not a number"),
    ("negative ping", {"GEMMA_WORKBENCH_SSE_PING_S": "-1"}, "GEMMA_WORKBENCH_SSE_PING_S: '-1' is not a number"),
    ("nan timeout", {"GEMMA_WORKBENCH_MULTIHOST_TIMEOUT": "nan"}, "GEMMA_WORKBENCH_MULTIHOST_TIMEOUT: 'nan'"),
    ("reconnect not a number", {"GEMMA_WORKBENCH_RECONNECT_S": "5m"}, "GEMMA_WORKBENCH_RECONNECT_S: '5m'"),
    ("home is a file", {"GEMMA_WORKBENCH_HOME": "{d}/data/good.jsonl"}, "GEMMA_WORKBENCH_HOME: "),
    ("runs dir is a file", {"GEMMA_WORKBENCH_RUNS": "{d}/data/good.jsonl"}, "GEMMA_WORKBENCH_RUNS: "),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad-inputs")
    for name, data in FILES.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    (d / "cfg.toml").write_text("[train]\nsteps = 2\n", encoding="utf-8")
    return d


def _digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def untouched(inputs):
    """After the module: every input file is still there, byte for byte."""
    before = _digest(inputs)
    yield
    assert _digest(inputs) == before


def _one_error_line(err: str, needle: str | None) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    if needle is not None:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def _main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse
        return int(e.code)


@pytest.fixture
def in_inputs(inputs, untouched, monkeypatch) -> Path:
    monkeypatch.chdir(inputs)
    return inputs


@pytest.mark.parametrize("file, needle", [r[1:] for r in CONFIG_ROWS], ids=[r[0] for r in CONFIG_ROWS])
def test_a_bad_config_file_is_one_line_with_its_place(in_inputs, capsys, file, needle):
    assert _main(["train", file, "--print-config"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    _one_error_line(err, needle)


@pytest.mark.parametrize("item, needle", [r[1:] for r in SET_ROWS], ids=[r[0] for r in SET_ROWS])
def test_a_bad_set_override_is_one_line_naming_it(in_inputs, capsys, item, needle):
    assert _main(["train", "cfg.toml", "--set", item, "--print-config"]) == 2
    _one_error_line(capsys.readouterr().err, needle)


@pytest.mark.parametrize("argv, code, needle", [r[1:] for r in DATA_ROWS], ids=[r[0] for r in DATA_ROWS])
def test_a_bad_data_file_is_reported_with_its_place(in_inputs, capsys, argv, code, needle):
    assert _main(["data", "check", *argv]) == code
    out, err = capsys.readouterr()
    if code == 2:
        _one_error_line(err, needle)
    else:  # some records dropped: the report cites file:line, nothing on stderr
        assert err == "" and "Traceback" not in out
        assert f"{argv[0]}:1" in out


@pytest.mark.parametrize("argv, needle", [r[1:] for r in CLI_ROWS], ids=[r[0] for r in CLI_ROWS])
def test_a_bad_command_line_is_one_line(in_inputs, capsys, argv, needle):
    assert _main(argv) == 2
    _one_error_line(capsys.readouterr().err, needle)


@pytest.mark.parametrize("env, needle", [r[1:] for r in ENV_ROWS], ids=[r[0] for r in ENV_ROWS])
def test_a_bad_environment_variable_is_one_line(in_inputs, capsys, monkeypatch, env, needle):
    for k, v in env.items():
        monkeypatch.setenv(k, v.format(d=in_inputs))
    assert _main(["runs"]) == 2
    _one_error_line(capsys.readouterr().err, needle)


def test_good_inputs_with_awkward_bytes_are_accepted(in_inputs, capsys, tmp_path):
    """Not every odd file is bad: a BOM, CRLF and an empty config are fine."""
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + GOOD_JSONL.replace(b"\n", b"\r\n"))
    assert _main(["data", "check", str(tmp_path / "bom.jsonl")]) == 0
    (tmp_path / "empty.toml").write_bytes(b"\xef\xbb\xbf\r\n")
    assert _main(["train", str(tmp_path / "empty.toml"), "--print-config"]) == 0
    assert "[train]" in capsys.readouterr().out


# --------------------------------------------------------------------------- runs, through the engine


@pytest.fixture(scope="module")
def engine_proc(engine_factory):
    return engine_factory(args=["--no-warm"])


@pytest.fixture(scope="module")
def engine_home(engine_proc) -> Path:
    return engine_proc.home


@pytest.fixture
def with_engine(engine_home, in_inputs, monkeypatch) -> Path:
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(engine_home))
    return engine_home


def _run_on_disk(home: Path, name: str, state: str) -> runs.RunDir:
    run = runs.create_run(load_config(None, [f"run.name={name}"]), root=home / "data" / "runs")
    if state != "queued":
        if not can_move("queued", state):
            run.set_state("running")  # e.g. completed: only a running run completes
        run.set_state(state)
    return run


@pytest.mark.parametrize("action", ["show", "stop", "resume", "attach"])
def test_an_unknown_run_is_one_line_for_every_action(with_engine, capsys, action):
    assert _main(["runs", action, "zz-no-such-run"]) == 2
    _one_error_line(capsys.readouterr().err, "no run 'zz-no-such-run'")


def test_a_run_in_the_wrong_state_is_refused_in_one_line_and_kept(with_engine, capsys):
    done = _run_on_disk(with_engine, "finished", "completed")
    assert _main(["runs", "stop", done.run_id]) == 2
    _one_error_line(capsys.readouterr().err, done.run_id)
    assert _main(["runs", "resume", done.run_id]) == 2
    _one_error_line(capsys.readouterr().err, done.run_id)
    live = _run_on_disk(with_engine, "live", "running")
    live.write_status("running", step=1, total_steps=10, pid=os.getpid())  # owned by this process
    assert _main(["runs", "delete", live.run_id, "--yes"]) == 2
    _one_error_line(capsys.readouterr().err, live.run_id)
    assert live.path.is_dir() and done.path.is_dir()


def test_an_ambiguous_prefix_deletes_nothing(with_engine, capsys):
    a, b = _run_on_disk(with_engine, "twin-a", "completed"), _run_on_disk(with_engine, "twin-b", "completed")
    common = os.path.commonprefix([a.run_id, b.run_id])
    assert _main(["runs", "delete", common, "--yes"]) == 2
    _one_error_line(capsys.readouterr().err, None)
    assert a.path.is_dir() and b.path.is_dir()


# --------------------------------------------------------------------------- the real executable


def _exe(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(EXE), *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env={**os.environ, **env})


@pytest.mark.parametrize(("source", "needle"), [
    ("/nonexistent/gemma", "no such path"),
    ("broken.gguf", "broken.gguf"),
    ("no-such-model-id", "no model 'no-such-model-id'"),
], ids=["missing-path", "unreadable-gguf", "unknown-id"])
def test_a_detached_run_of_a_model_that_cannot_load_is_refused_before_its_folder_exists(
        with_engine, capsys, tmp_path, source, needle):
    (tmp_path / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\0" * 20)  # cut short
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\nsource = "{source}"\n[train]\nsteps = 3\n')
    runs_dir = with_engine / "data" / "runs"
    before = sorted(p.name for p in runs_dir.iterdir()) if runs_dir.is_dir() else []
    code = main(["train", str(config), "--detach"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err
    assert "[model] source" in err
    after = sorted(p.name for p in runs_dir.iterdir()) if runs_dir.is_dir() else []
    assert after == before  # nothing made, nothing left failed behind


LONG_NAME = "x" * 5000
"""Longer than any file system takes: a lookup fails with ENAMETOOLONG, not ENOENT."""


@pytest.mark.parametrize(("method", "path", "body", "needle"), [
    ("POST", "/v1/data/check", {"path": LONG_NAME}, "name too long"),
    ("GET", "/v1/models", {"folders": LONG_NAME}, "name too long"),
    ("POST", "/v1/sample", {"prompt": "hi", "run_id": LONG_NAME}, "no run"),
    ("POST", "/v1/compare", {"prompt": "hi", "run_id": LONG_NAME}, "no run"),
    ("POST", "/v1/export", {"run_id": LONG_NAME, "out": "/tmp/x"}, "no run"),
], ids=["data-check", "models", "sample", "compare", "export"])
def test_a_name_too_long_for_the_file_system_is_a_4xx_not_a_500(engine_proc, method, path, body,
                                                                needle):
    import httpx

    token = (engine_proc.runtime / "engine.token").read_text().strip()
    transport = httpx.HTTPTransport(uds=str(engine_proc.runtime / "engine.sock"))
    with httpx.Client(base_url="http://engine", transport=transport, timeout=60,
                      headers={"Authorization": f"Bearer {token}"}) as http:
        r = (http.get(path, params=body) if method == "GET" else http.post(path, json=body))
        assert http.get("/v1/status").status_code == 200
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    message = r.json()["error"]["message"]
    assert needle in message.lower() and len(message) < 400, message


@pytest.mark.skipif(not EXE.exists(), reason="no .venv/bin/gemma-workbench")
def test_the_real_executable_reports_bad_inputs_in_one_line(inputs, untouched, tmp_path):
    r = _exe(["train", "lr_nan.toml", "--print-config"], inputs)
    assert r.returncode == 2 and r.stdout == ""
    _one_error_line(r.stderr, "lr_nan.toml:2 [train] learning_rate")
    r = _exe(["data", "check", "data/deep.jsonl"], inputs)
    assert r.returncode == 2
    _one_error_line(r.stderr, "data/deep.jsonl")
    r = _exe(["runs", "delete", "x"], inputs)  # stdin is not a terminal
    assert r.returncode == 2
    _one_error_line(r.stderr, "--yes")
    r = _exe(["runs"], inputs, GEMMA_WORKBENCH_ENGINE_IDLE_EXIT="ten")
    assert r.returncode == 2
    _one_error_line(r.stderr, "GEMMA_WORKBENCH_ENGINE_IDLE_EXIT")


@pytest.mark.skipif(not EXE.exists(), reason="no .venv/bin/gemma-workbench")
def test_config_paths_resolve_against_the_config_not_the_directory_it_is_run_from(tmp_path):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.jsonl").write_bytes(GOOD_JSONL)
    (project / "run.toml").write_text('[data]\npath = "data/train.jsonl"\n[run]\ndir = "runs"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _exe(["train", "../project/run.toml", "--print-config"], elsewhere)
    assert r.returncode == 0, r.stderr
    assert f'path = "{project / "data" / "train.jsonl"}"' in r.stdout
    assert f'dir = "{project / "runs"}"' in r.stdout

