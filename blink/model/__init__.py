"""Loading weights (adapters merged, weights verified) and the offline demo model."""
