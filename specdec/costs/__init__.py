"""What a forward, and a whole speculative round, cost on this machine: measured and cached.

profiling.py times one model's forward and interpolates; cost_model.py combines the target's
and the proposers' profiles with the measured per-round overhead (rounds.py) and caches them.
The engine's adaptive policy and the analysis read costs from here.
"""
