#!/usr/bin/env bash
# Start a second, user-namespaced Docker engine beside the main one (as root), and give it the
# sandbox image. Its containers' root is an unprivileged user of this machine (dockerd
# --userns-remap=default: uid 0 inside is a subordinate uid outside), so a process that escaped
# the container would hold no privilege here. Use it with:
#
#   DOCKER_HOST=unix:///run/insandbox-userns/docker.sock insandbox run ...
#
# Its containers sit on a bridge of their own (insandbox-ns0, 172.30.0.0/24) with no route out:
# one engine manages this machine's iptables, and `--bridge=none` would delete the main engine's
# docker0. Stop it with: kill $(cat /run/insandbox-userns/docker.pid)
set -euo pipefail
run=/run/insandbox-userns
sock=unix://$run/docker.sock
mkdir -p "$run"
if ! ip link show insandbox-ns0 >/dev/null 2>&1; then
  ip link add insandbox-ns0 type bridge
  ip addr add 172.30.0.1/24 dev insandbox-ns0
  ip link set insandbox-ns0 up
fi
if ! DOCKER_HOST=$sock docker info >/dev/null 2>&1; then
  nohup dockerd --userns-remap=default --data-root /var/lib/insandbox/docker-userns --host "$sock" \
    --exec-root "$run/exec" --pidfile "$run/docker.pid" --bridge=insandbox-ns0 --iptables=false --ip-masq=false \
    >>/var/log/insandbox-userns-dockerd.log 2>&1 &
  for _ in $(seq 60); do DOCKER_HOST=$sock docker info >/dev/null 2>&1 && break; sleep 0.5; done
  DOCKER_HOST=$sock docker info >/dev/null 2>&1 || { tail -20 /var/log/insandbox-userns-dockerd.log; exit 1; }
fi
image=${1:-insandbox:latest}
if ! DOCKER_HOST=$sock docker image inspect "$image" >/dev/null 2>&1; then
  echo "copying $image into the user-namespaced engine"
  docker save "$image" | DOCKER_HOST=$sock docker load -q
fi
echo "ready: DOCKER_HOST=$sock"
