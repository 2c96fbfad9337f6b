"""Reusable widgets of the workbench TUI (plots, memory-fit bar, device grid, LoRA form)."""
