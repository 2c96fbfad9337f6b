"""Classification as generation: a record's ``label`` becomes the answer text (contract key
``[data] labels``).

With ``labels = {0 = "negative", 1 = "positive"}`` a record ``{"text": "...", "label": 1}``
becomes the prompt/response pair ``prompt = text``, ``response = "positive"``: the model learns
to answer with the label's text, and ``exact_match`` on the eval split is the classification
accuracy. The label is looked up as text (``1``, ``"1"`` and ``1.0``-free integers alike); when
the dataset names its classes (a ``ClassLabel``: IMDB's ``neg``/``pos``) the class name works as
a key too. The text to classify is ``prompt`` if the record has one (``--field prompt=review``
names another column), else ``text``. A label missing from the map drops the record with its
``file:row`` and the known labels.
"""

from __future__ import annotations

from typing import Any

from adapters_lib.data.record_error import RecordError


def label_answer(value: Any, labels: dict[str, str], names: list[str] | None = None) -> str:
    """The answer text of one label value (``RecordError`` when the map has none)."""
    keys = [str(value)]
    if isinstance(value, bool):
        keys = [str(value).lower()]
    elif isinstance(value, float) and value.is_integer():
        keys = [str(int(value))]
    if names and isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        keys.append(names[value])
    for key in keys:
        if key in labels:
            return labels[key]
    known = ", ".join(f"{k} = {v!r}" for k, v in labels.items())
    raise RecordError(f"label {value!r} is not in [data] labels ({known})", "label")


def apply_labels(data: dict[str, Any] | str, labels: dict[str, str],
                 names: list[str] | None = None) -> dict[str, Any] | str:
    """``data`` as a prompt/response record when it has a ``label`` (see the module doc)."""
    if not labels or isinstance(data, str) or "label" not in data:
        return data
    out = dict(data)
    out["response"] = label_answer(data["label"], labels, names)
    if "prompt" not in out:
        if "text" not in out:
            fields = ", ".join(sorted(map(str, data)))
            raise RecordError(f"a labelled record needs the text to classify in prompt or text "
                              f"(fields: {fields}); name it with [data] field_map", "text")
        out["prompt"] = out.pop("text")
    out.pop("completion", None)
    return out
