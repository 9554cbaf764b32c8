"""The vocabulary every layer shares: errors, the run options (the one grammar of the CLI, the API, the
magics and the task command), injected delays and models.

The lowest layer (CONTRIBUTING.md has their order): imports nothing else of ssptk; everything may import it.
Nothing here imports TensorFlow, pandas or matplotlib at import time.
"""
