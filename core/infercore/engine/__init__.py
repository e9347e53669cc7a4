"""The engine: requests in, tokens out, one scheduled step at a time."""
