"""What runs in the API / `LLM` process: input and output processing, detokenizing, and the clients
that talk to one EngineCore (`core_client`) or several (`dp_client`) over the wire."""
