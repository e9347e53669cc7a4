"""Workers: the model runner that turns a scheduled step into one forward pass and sampled tokens."""
