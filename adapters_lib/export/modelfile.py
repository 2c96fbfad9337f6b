'''An Ollama ``Modelfile`` beside an exported GGUF, and the ``ollama create`` line.

``FROM`` the merged file (``--format gguf``) or the base model (``--format gguf-lora``: an
Ollama model name when the run's base came from Ollama's store, else the base GGUF's path,
else the base written beside the adapter), ``ADAPTER`` the LoRA file, the Gemma chat
``TEMPLATE`` and the stop token. Paths beside the Modelfile are written ``./name`` (Ollama
reads them relative to the Modelfile).

The template writes what the workbench trains on and samples with
(``adapters_lib.data.chat_template``): ``<start_of_turn>user\\n{text}<end_of_turn>\\n``, a
system message folded into the first user turn as ``{system}\\n\\n{user}``, the open model
turn ``<start_of_turn>model\\n`` last. BOS comes from the file (``add_bos_token``).
'''

from __future__ import annotations

import re
from pathlib import Path

from adapters_lib.export.gguf_meta import STOP_TOKENS

MODELFILE = "Modelfile"

OLLAMA_TEMPLATE = """{{- $system := "" }}
{{- range $i, $m := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 }}
{{- if eq $m.Role "system" }}
{{- $system = $m.Content }}
{{- else if eq $m.Role "user" }}<start_of_turn>user
{{ if $system }}{{ $system }}

{{ end }}{{ $m.Content }}<end_of_turn>
{{ $system = "" }}
{{- if $last }}<start_of_turn>model
{{ end }}
{{- else if eq $m.Role "assistant" }}<start_of_turn>model
{{ $m.Content }}{{ if not $last }}<end_of_turn>
{{ end }}
{{- end }}
{{- end }}"""


def ollama_name(name: str) -> str:
    """A model name ``ollama create`` takes: lower case, ``[a-z0-9._-]``."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")
    return slug or "gemma-workbench"


def reference(target: Path, folder: Path) -> str:
    """``./file`` for a file inside ``folder``, else the absolute path."""
    try:
        return f"./{Path(target).absolute().relative_to(folder.absolute()).as_posix()}"
    except ValueError:
        return str(Path(target).absolute())


def modelfile_text(model: str, *, adapter: str = "", comment: str = "") -> str:
    """The Modelfile: ``model``/``adapter`` as ``reference`` wrote them."""
    lines = [f"# {line}" for line in comment.splitlines() if line.strip()]
    lines.append(f"FROM {model}")
    if adapter:
        lines.append(f"ADAPTER {adapter}")
    lines.append(f'TEMPLATE """{OLLAMA_TEMPLATE}"""')
    lines += [f'PARAMETER stop "{t}"' for t in STOP_TOKENS]
    return "\n".join(lines) + "\n"


def write_modelfile(folder: Path, model: str | Path, *, adapter: str | Path | None = None,
                    comment: str = "") -> Path:
    """``folder/Modelfile`` for ``model`` (a file in ``folder``, a path or an Ollama name)."""
    text = modelfile_text(_ref(model, folder), adapter=_ref(adapter, folder) if adapter else "",
                          comment=comment)
    path = folder / MODELFILE
    path.write_text(text, encoding="utf-8")
    return path


def _ref(target: str | Path, folder: Path) -> str:
    if isinstance(target, Path):
        return reference(target, folder)
    return str(target)  # an Ollama model name (``gemma3:270m``)


def create_command(name: str, final_folder: Path) -> str:
    """``ollama create NAME -f FOLDER/Modelfile`` (the folder the export ends up in)."""
    return f"ollama create {ollama_name(name)} -f {final_folder / MODELFILE}"
