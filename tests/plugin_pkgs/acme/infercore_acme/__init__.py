"""infercore-acme: an out-of-tree platform, attention backend, custom ops and a GPT-2 model."""
