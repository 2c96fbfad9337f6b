"""Datasets for fine-tuning: readers, formats, the Gemma chat template, tokenization,
packing, the training pipeline and the validation report.

numpy only: nothing here imports JAX, so the CLI's ``data check`` and the TUI's preview
stay light. See docs/data.md.
"""

from adapters_lib.data.batches import Batch, Pipeline
from adapters_lib.data.chat_template import format_prompt, render
from adapters_lib.data.formats import FORMATS, Example
from adapters_lib.data.packing import attention_mask
from adapters_lib.data.pipeline import build_pipeline
from adapters_lib.data.readers import DataIssue, Where, read_path
from adapters_lib.data.tokenize import TokenCodec
from adapters_lib.data.validate import Report, check_file, check_spec

__all__ = [
    "FORMATS", "Batch", "DataIssue", "Example", "Pipeline", "Report", "TokenCodec", "Where",
    "attention_mask", "build_pipeline", "check_file", "check_spec", "format_prompt", "read_path", "render",
]
