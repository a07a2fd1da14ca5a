"""The forward pass: shared prefixes, length-bucketed passes, the prefix-state cache, prompts scored token by token
(echo), vision features, and the one compute thread the CPU's passes run on."""
