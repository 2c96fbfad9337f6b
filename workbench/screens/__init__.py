"""The workbench screens, one per module; each module exposes ``SCREEN`` (its class)."""
