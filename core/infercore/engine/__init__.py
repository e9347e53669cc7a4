"""The EngineCore process: the step loop (schedule, execute, update), its ZMQ process wrapper, the
output IO thread and the grammar gate. The front end reaches it only through `infercore.wire`."""
