"""DS4-mini: the embedded CPU engine that dflash-qualify ships and qualifies."""
from . import _core  # noqa: F401
