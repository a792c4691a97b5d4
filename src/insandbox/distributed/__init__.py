"""Many machines: benchmark samples and RL rollouts spread over the nodes of a Ray cluster,
each node with its own Docker engine (cluster.py: the connection and one worker actor per node;
bench.py and rollouts.py: what those workers run)."""
