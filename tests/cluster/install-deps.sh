#!/bin/sh
# Debian packages the network-namespace cluster tests need: `ip`/`tc` (iproute2), `sshd` and
# `ssh-keygen` (openssh-server/-client), and `nft` (nftables), with which adrun closes a job's
# TF ports to other hosts (the exposure tests; without it those skip and jobs warn). Idempotent and quiet: does nothing when every tool is
# present, runs `apt-get update` only when something must be installed, and never fails the
# caller when it cannot install (not root, no apt): the cluster tests then skip with a reason.
set -u

missing=""
[ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing="$missing iproute2"
[ -x /usr/sbin/sshd ] || missing="$missing openssh-server"
command -v ssh-keygen >/dev/null 2>&1 || missing="$missing openssh-client"
[ -x /usr/sbin/nft ] || [ -x /sbin/nft ] || missing="$missing nftables"

[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: missing$missing (needs root and apt-get); cluster tests will skip" >&2
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >/dev/null 2>&1; then
    echo "install-deps: could not install$missing; cluster tests will skip" >&2
fi
exit 0
