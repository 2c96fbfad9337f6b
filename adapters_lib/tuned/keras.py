"""The Keras route's tuned model: keras-hub's Gemma with its LoRA kernels on (tuned) or zeroed
(base), so one model serves both sides.

Decoding is greedy (``keras_route.generate``: fixed shapes, one compile); sampling settings
other than greedy are refused rather than silently ignored. A batch of prompts is decoded
whole, then streamed out token by token.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.sample.prompts import Prompt
from adapters_lib.sample.settings import Piece, SamplingSettings
from adapters_lib.sample.text_stream import TextStream
from adapters_lib.tuned.base import TunedModel


class KerasTunedModel(TunedModel):
    backend = "keras"

    def __init__(self, keras_tuned: Any, run: Any):
        self.keras = keras_tuned
        self.cfg = keras_tuned.cfg
        self.step = keras_tuned.step
        self.run_path = Path(run.path)
        self.run_id = run.run_id
        self.source = self.cfg.model.source
        self.lora = self.cfg.lora if self.cfg.lora.enabled else None
        self._tokenizer: Any = None

    @classmethod
    def from_run(cls, run: Any, step: int | None = None) -> KerasTunedModel:
        from adapters_lib.keras_route.generate import load_keras_tuned

        return cls(load_keras_tuned(run.path, step), run)

    def settings_record(self, settings: SamplingSettings) -> dict[str, Any]:
        return {**settings.to_dict(), "backend": "keras", "decoding": "greedy"}

    def stream(self, prompts: Mapping[str, Sequence[Prompt]], settings: SamplingSettings, *,
               chat: bool = True) -> Iterator[Piece]:
        sides = list(prompts)
        self.check_sides(sides)
        if not settings.greedy:
            raise WorkbenchError("the Keras route decodes greedily", where="--temperature",
                                 hint="use temperature 0 for a Keras run")
        if not chat:
            raise WorkbenchError("the Keras route answers chat prompts only", where="--raw",
                                 hint="drop --raw for a Keras run")
        if self._tokenizer is None:
            self._tokenizer = self.keras.tokenizer()
        for i, side in enumerate(sides):
            done = self.keras.completions(list(prompts[side]), tuned=side == "tuned",
                                          max_new_tokens=settings.max_new_tokens)
            for row, (ids, stopped) in enumerate(done):
                text = TextStream(self._tokenizer)
                for token in ids:
                    yield Piece(i, row, text.push(token), int(token), side=side)
                yield Piece(i, row, text.flush(), None, done=True,
                            stop_reason="stop" if stopped else "length", side=side)

    def exact_match(self, examples: Sequence[dict[str, Any]], *, side: str = "tuned") -> Any:
        self.check_sides([side])
        return self.keras.exact_match(examples, tuned=side == "tuned")

    def export(self, fmt: str, out: str | Path | None = None, *, force: bool = False,
               quant: str = "") -> dict[str, Any]:
        from adapters_lib.export import formats
        from adapters_lib.export.run import check_format, default_out
        from adapters_lib.keras_route.export import write_keras_adapter

        fmt = formats.resolve(fmt)
        check_format(self.cfg, fmt, self.run_id)
        target = write_keras_adapter(self.keras, out or default_out(self.run_path, fmt), force=force,
                                     owned=not out, run_id=self.run_id)
        return {"run_id": self.run_id, "step": self.step, "format": fmt, "out": str(target)}
