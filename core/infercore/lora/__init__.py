"""Multi-LoRA serving: adapter requests, PEFT checkpoints, stacked device slots and the layers that
apply them per token (:mod:`infercore.lora.layers`)."""
