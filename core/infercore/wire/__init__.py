"""The typed messages that cross a process boundary: engine requests and outputs (API process ⇄
EngineCore), the scheduler's step input and the runner's output (EngineCore ⇄ workers), the model's
facts, the KV cache layout, and the msgpack codec. Nothing here imports the front end, the engine,
the scheduler, the executor or the worker."""
