"""DS4-mini: the embedded CPU engine that dflash-qualify ships and qualifies."""
from . import _core  # noqa: F401
from .config import MODEL_CONFIGS, config_hash, load_config, q8_weight_bytes, validate_config
from .engine import Engine, build_info, cuda_unavailable_reason
from .errors import EngineError
from .options import ENV_BANDS, ENV_MMVQ
from .results import GenerateResult, PrefillResult
from .band_schedule import schedule, schedule_approximate
from .session import Session
from .tokenizer import BOS, EOS, VOCAB, detokenize, tokenize

__all__ = [
    "BOS", "ENV_BANDS", "ENV_MMVQ", "EOS", "Engine", "EngineError", "GenerateResult", "MODEL_CONFIGS",
    "PrefillResult", "Session", "VOCAB", "build_info", "config_hash", "cuda_unavailable_reason", "detokenize", "load_config",
    "q8_weight_bytes", "schedule", "schedule_approximate", "tokenize", "validate_config",
]
