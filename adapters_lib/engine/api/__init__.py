"""The engine's API (v1) as types: every command a client can send, and every reply.

Both sides import this module: the server (``server.py``) parses a request into a command
and serializes the handler's typed reply with ``to_json()``; the client
(``workbench/client.py``) builds the same commands and reads replies back with
``from_json()``. The routes, their bodies and their replies are declared here once; the
prose is docs/engine-api.md. Importable without JAX, aiohttp or textual (an import-linter
contract and tests/test_import_boundaries.py keep it so).

Why frozen dataclasses (``jsontypes.Record``) and not TypedDicts: a reply is checked when it
is read (a wrong type or a missing key fails at the client, with the key named, instead of a
screen guessing ``d.get("id") or d.get("run_id")``); fields have defaults, so the test fake
(tests/engine_fake.py) builds replies with the same constructors the engine uses and cannot
invent a key; and a newer engine's extra keys survive in ``extra``. TypedDicts would check
nothing at run time, and nothing here runs a static type checker.

A command declares what it needs as class attributes:
``needs_jax`` (wait for JAX and the heavy modules before running), ``touches_devices`` (runs
device code: a multi-host leader broadcasts it to every process), ``streams`` (the answer is
a server-sent event stream). ``route`` is its HTTP method, path and where its values travel
(body or query); ``reply`` (or ``items``, for a stream) the type of its answer.

``replies.py`` holds the reply types, ``streams.py`` the stream items, ``commands.py`` the
commands and their parser (``chat.py``, ``generation.py``: the generation area's); this
package exports them all. Another area adds its own commands and replies there, each in a
block of its own at the end of the file (and in that file's ``__all__``), never by
reshaping these. A field marked ``additive`` joined v1 after its type did: it has a
default, so a body or reply without it still reads.
"""

from adapters_lib.engine.api.chat import *  # noqa: F403
from adapters_lib.engine.api.chat import __all__ as _chat
from adapters_lib.engine.api.commands import *  # noqa: F403
from adapters_lib.engine.api.commands import __all__ as _commands
from adapters_lib.engine.api.compiles import *  # noqa: F403  (the compile queue: registers its routes)
from adapters_lib.engine.api.compiles import __all__ as _compile
from adapters_lib.engine.api.evals import *  # noqa: F403  (evals: registers the sweep routes)
from adapters_lib.engine.api.evals import __all__ as _evals
from adapters_lib.engine.api.generation import *  # noqa: F403  (generation: registers CompareSet)
from adapters_lib.engine.api.generation import __all__ as _generation
from adapters_lib.engine.api.replies import *  # noqa: F403
from adapters_lib.engine.api.replies import __all__ as _replies
from adapters_lib.engine.api.streams import *  # noqa: F403
from adapters_lib.engine.api.streams import __all__ as _streams
from adapters_lib.jsontypes import Record, to_jsonable

__all__ = [*_replies, *_streams, *_commands, *_chat, *_generation, *_evals, *_compile, "Record",
           "to_jsonable"]
