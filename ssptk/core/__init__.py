"""The vocabulary every layer shares: errors, the run options (the one grammar of the CLI, the API, the
magics and the task command), injected delays and models.

Layer 0: imports nothing else of ssptk; everything may import it. Nothing here imports TensorFlow,
pandas or matplotlib at import time.
"""
