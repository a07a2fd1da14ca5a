"""The forward pass: shared prefixes, length-bucketed passes, the prefix-state cache, vision features."""
