"""A PyTorch engine that offloads its KV cache through kvtier's Python module (see engine.py)."""

from .engine import Engine, EngineStats, Request, kvtier_config_for
from .model import ForwardInput, ModelConfig, TinyDecoder

__all__ = [
    "Engine",
    "EngineStats",
    "ForwardInput",
    "ModelConfig",
    "Request",
    "TinyDecoder",
    "kvtier_config_for",
]
