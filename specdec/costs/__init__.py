"""What a forward and a whole round cost on this machine: profiling.py times forwards,
rounds.py prices real engine steps t(b, k), cost_model.py holds both, cache.py stores them."""
