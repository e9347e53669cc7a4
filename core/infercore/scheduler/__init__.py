"""Scheduling inside the EngineCore process: requests, the token-budget scheduler, the KV cache
managers (one per layout, behind the `KVCacheManager` protocol) and their block pool."""
