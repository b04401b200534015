#!/usr/bin/env bash
# System packages the test suite uses from Debian, installed non-interactively; safe to run again:
# prometheus (prometheus and promtool: config and rule checks, rule unit tests, live PromQL tests),
# prometheus-alertmanager (amtool: the Alertmanager configuration check),
# the ShellCheck linter (the shell scripts in docker/ and .ci/), and iproute2 (ip and tc: network
# namespaces and shaped links for the network-cut fault test and the bench network smoke test), and
# chromium (headless: renders `shadowtutor evaluate`'s HTML report in its test).
# (hadolint, docker-compose and the Compose schema come from PyPI with the dev extra.)
set -euo pipefail

packages=(prometheus prometheus-alertmanager shellcheck iproute2 chromium)
commands=(prometheus promtool amtool shellcheck ip tc chromium)

missing=0
for command in "${commands[@]}"; do
    command -v "$command" >/dev/null 2>&1 || missing=1
done
if [ "$missing" = 0 ]; then
    echo "install-system-deps: ${packages[*]} already installed"
    exit 0
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
    sudo=(sudo)
fi

# The prometheus package would start a system-wide Prometheus on port 9090; the tests start
# their own. Where nothing else forbids service starts, forbid them for this install only.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    trap '"${sudo[@]}" rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
echo "install-system-deps: installed ${packages[*]}"
