"""The worker runtime: what runs inside each TensorFlow task (modes, models, delay injection)."""
