"""What runs inside a sandbox: the in-container server (server.py, PID 1) and the protocol the
host speaks with it (protocol.py). Both are standard library only: their source is sent into the
container when it starts."""
