"""KV cache description shared by the scheduler and the model runner."""

from infercore.kv_cache.spec import KVCacheSpec

__all__ = ["KVCacheSpec"]
