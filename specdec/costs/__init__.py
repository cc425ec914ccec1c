"""What a forward, and a whole speculative round, cost on this machine: measured and cached.

profiling.py times one model's forward; rounds.py prices real engine steps t(b, k);
cost_model.py holds both, measured up front and cached on disk (cache.py). The adaptive
policy and the analysis read costs from here.
"""
