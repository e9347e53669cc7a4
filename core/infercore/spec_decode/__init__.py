"""Speculative decoding: its configuration, the proposers that guess draft tokens, and the rejection
sampler that verifies them against the target model so the output distribution stays the target's.

Importing this package is cheap (the configuration imports it): each module imports what it needs.
"""
