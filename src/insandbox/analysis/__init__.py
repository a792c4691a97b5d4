"""What a model did and what it cost, computed from trajectories: token and time
accounting, capability usage, plots."""
