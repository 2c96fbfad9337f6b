"""The engine's commands: kept importable from here; they live in ``adapters_lib.engine.api``.

New code imports ``adapters_lib.engine.api`` (commands and their typed replies together).
"""

from adapters_lib.engine.api.commands import *  # noqa: F403
from adapters_lib.engine.api.commands import __all__  # noqa: F401
from adapters_lib.engine.api.replies import API_VERSION  # noqa: F401
