"""zerodoctor: why a DeepSpeed ZeRO run is failing or slow, and which config change fixes it."""

__version__ = "0.1.0"
