"""Grammar backends for infercore's constrained decoding: xgrammar, llguidance, and auto."""
