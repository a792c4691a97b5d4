# The allow-list proxy of `--network registries`: Debian's tinyproxy on the same Debian
# base as the sandbox image. Built by insandbox on first use (or `insandbox image
# build-proxy`) as insandbox-proxy:<hash of this file>; the configuration and the
# allow-list are written into each proxy container before it starts (see proxy.py).
ARG BASE=insandbox-base:bookworm
FROM ${BASE}

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tinyproxy \
 && rm -rf /var/lib/apt/lists/*

# tinyproxy drops to its own user, which must be able to enter "/": a base made with
# debootstrap has a root folder of mode 0700, and a RUN layer cannot record a change to
# "/" itself, so the container sets it when it starts.
CMD ["sh", "-c", "chmod 755 / && exec tinyproxy -d -c /etc/tinyproxy/insandbox.conf"]
